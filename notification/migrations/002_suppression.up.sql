-- Suppressed addresses: no request goes to one, critical or not. An
-- address is kept normalised as package feedback's NormalizeAddress does
-- (a mail address lower-cased, a phone number and a push token as given),
-- and so is every recipient it is compared with. Written by the
-- dispatcher when it applies a provider's report (a hard bounce, a
-- complaint, an unsubscribe, an unregistered push token, too many
-- transient failures), and by the application inside its own
-- transactions (an unsubscribe link); removed by an operator, or by the
-- person's resubscribe for a row of class 'unsubscribe'.
CREATE TABLE suppression (
    channel    text        NOT NULL,
    address    text        NOT NULL,
    scope      text        NOT NULL DEFAULT '', -- '' for every category, or one category
    class      text        NOT NULL,            -- permanent, transient, complaint or unsubscribe
    reason     text        NOT NULL,            -- machine code, such as bounce.permanent
    provider   text        NOT NULL DEFAULT '', -- the provider that reported it; '' for the application's
    source     text        NOT NULL DEFAULT '', -- the report's event id, or the application's note
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, address, scope)
);

-- Transient failures of an address within the dispatcher's
-- TransientWindow, newest last: enough of them suppress it. One row per
-- address, so that two reports of one address take turns on it.
CREATE TABLE transient_failure (
    channel    text          NOT NULL,
    address    text          NOT NULL,
    failed_at  timestamptz[] NOT NULL,
    updated_at timestamptz   NOT NULL DEFAULT now(),
    PRIMARY KEY (channel, address)
);
