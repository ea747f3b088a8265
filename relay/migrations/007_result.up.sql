-- Records by their result (what a sink answered Done with, such as a
-- provider's reference for a message), for a sink that must find the
-- record a later event is about: a provider's report names the message by
-- the reference its send returned. Only records with a result enter it.
CREATE INDEX outbox_result ON outbox (result) WHERE result <> '';
