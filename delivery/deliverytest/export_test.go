package deliverytest

// The suite's checks, for the self-test to run one against a faulty module
// with a recording tb and see it fail.
var (
	Delivers                       = delivers
	SameIDSameKey                  = sameIDSameKey
	CancelledContextIsRetry        = cancelledContextIsRetry
	TimeoutIsRetry                 = timeoutIsRetry
	ProviderErrorsStayOutOfReasons = providerErrorsStayOutOfReasons
)

// Marker is what the suite plants in a provider's error body.
const Marker = marker
