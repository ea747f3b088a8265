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

// ExpoReports turns a getReceipts answer into the reports of ids, as
// Receipts does.
func ExpoReports(raw []byte, ids []string) ([]Report, error) {
	answer, err := decodeExpoAnswer(raw)
	if err != nil {
		return nil, err
	}
	var reports []Report
	for _, id := range ids {
		if rc, ok := answer.Data[id]; ok {
			reports = append(reports, expoReport(id, rc))
		}
	}
	return reports, nil
}

// SNSStringToSign decodes an SNS body and returns the string SNS signs
// for it.
func SNSStringToSign(body []byte) (string, error) {
	m, err := parseSNSMessage(body)
	if err != nil {
		return "", err
	}
	return snsStringToSign(m), nil
}
