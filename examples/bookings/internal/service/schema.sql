-- The application's own tables: a booking service's users and bookings.
CREATE SCHEMA IF NOT EXISTS bookings;

CREATE TABLE IF NOT EXISTS bookings.users (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    email      text NOT NULL,
    phone      text NOT NULL,
    push_token text NOT NULL
);

CREATE TABLE IF NOT EXISTS bookings.bookings (
    id        bigserial PRIMARY KEY,
    driver_id text NOT NULL REFERENCES bookings.users,
    host_id   text NOT NULL REFERENCES bookings.users,
    place     text NOT NULL,
    starts_at timestamptz NOT NULL,
    status    text NOT NULL DEFAULT 'requested'
);
