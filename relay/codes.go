package relay

// Codes are stable machine codes beside a reason's text, kept on the row
// (Status.Code, DeadRecord.Code) and on each timeline entry, so that
// records can be grouped and re-emitted by cause. A sink gives its own
// with Result.WithCode; these are the relay's.
const (
	// CodeMaxHands: dead after more than Config.MaxHands hands, because the
	// record keeps crashing or hanging its handler.
	CodeMaxHands = "handler.poison"
	// CodeMaxUnsure: dead after Config.MaxUnsure answers Unsure, because
	// the sink's own transaction keeps failing.
	CodeMaxUnsure = "handler.unsure"
	// CodeNoAnswer: the sink returned without an answer for the record.
	CodeNoAnswer = "handler.no_answer"
	// CodePanic: the sink panicked.
	CodePanic = "handler.panic"
	// CodeLostHand: a hand ended without an answer, because its process
	// stopped or its lease ran out (a timeline entry's code).
	CodeLostHand = "handler.lost"
	// CodeCancelled: cancelled before it was processed.
	CodeCancelled = "cancelled"
)
