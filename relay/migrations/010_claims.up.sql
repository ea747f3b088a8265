-- Claims: how many times the row was claimed, counted by every claim and
-- never taken back or reset (a re-emit resets hands, a Later or an Unsure
-- answer takes its hand back). The settle names the claim it answers: a
-- settle sent again after its first landing gave the record back cannot
-- land on the claim that came next, which the hands and attempts it was
-- fenced by alone did not tell from its own.
ALTER TABLE outbox ADD COLUMN claims bigint NOT NULL DEFAULT 0;
