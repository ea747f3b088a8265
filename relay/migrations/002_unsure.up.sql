-- Answers of "unsure" (the sink could not tell whether its effect took
-- place, as when its own transaction failed): counted apart from the hands,
-- which count crashes and hangs, and bounded by the relay's MaxUnsure.
ALTER TABLE outbox ADD COLUMN unsure int NOT NULL DEFAULT 0;
