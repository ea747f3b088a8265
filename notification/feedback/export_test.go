package feedback

// Exported for the tests of package feedback_test.
var (
	VerifySvix          = verifySvix
	ParseSvixSignatures = parseSvixSignatures
	SvixSign            = svixSign
	ParseResend         = parseResend
)

var ParsePostmark = parsePostmark

var ParseSES = parseSES

var (
	VerifySendGrid   = verifySendGrid
	ParseSendGridKey = parseSendGridKey
	ParseSendGrid    = parseSendGrid
)

var (
	VerifyTwilio = verifyTwilio
	ParseTwilio  = parseTwilio
)
