-- The in-app inbox: one row per notification delivered to a user. The id is
-- the request's id (delivery.Pending.ID), so a redelivery cannot add a row.
CREATE TABLE inapp_notifications (
    id             uuid        PRIMARY KEY,
    recipient      text        NOT NULL,               -- the user id
    template       text        NOT NULL DEFAULT '',
    data           jsonb       NOT NULL DEFAULT '{}',
    correlation_id text        NOT NULL DEFAULT '',
    created_at     timestamptz NOT NULL DEFAULT now(),
    read_at        timestamptz                           -- null while unread
);

-- A user's notifications, newest first: List and MarkAllRead.
CREATE INDEX inapp_notifications_recipient
    ON inapp_notifications (recipient, created_at DESC, id DESC);

-- A user's unread notifications: UnreadCount and List with UnreadOnly.
-- Partial, so read notifications leave it and it stays small.
CREATE INDEX inapp_notifications_unread
    ON inapp_notifications (recipient, created_at DESC, id DESC)
    WHERE read_at IS NULL;
