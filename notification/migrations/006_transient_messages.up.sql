-- The message of each transient failure of an address, beside its time,
-- so that a message a provider reports delayed at each of its retries
-- (SendGrid's deferred, Resend's delivery_delayed) counts once toward the
-- TransientLimit. Failures counted before have no message here: '' (or
-- none), which matches no other.
ALTER TABLE transient_failure ADD COLUMN message_id text[] COLLATE "C" NOT NULL DEFAULT '{}';
