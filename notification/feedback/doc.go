// Package feedback receives what providers report about the messages the
// delivery modules sent (bounces, complaints, unsubscribes, delivery
// confirmations, push receipts), verifies each report on its raw body,
// and turns it into [Report] values with a [Class] and a stable reason
// code. It stores and applies nothing itself: a receiver hands the
// reports of each verified request to a [Store], which stages them as
// outbox records keyed by [Report.EventID] in its own transaction, and
// the receiver answers the provider 2xx only once that committed:
// notification.Client.FeedbackStore is that Store, and the notification
// dispatcher applies each report once, through the inbox, later.
//
// # The receivers
//
// Each provider has a constructor that returns an [http.Handler] to mount
// on the service's own mux, at the path configured at the provider:
// [NewResend], [NewPostmark], [NewSES], [NewSendGrid] and [NewTwilio].
// They share one skeleton. A request other than a POST is answered 405. A
// body longer than [HandlerConfig.MaxBodyBytes] is answered 413 before
// anything else. Then the provider's scheme is verified on the raw body,
// with constant-time comparisons; a request that fails is answered 401 and
// the Store is not called. A verified body that cannot be read is
// answered 400 (and 400 is final: the provider would only send it
// again). A verified request with reports calls the Store once; its error
// is answered 503, so that the provider retries, and its nil 2xx. Answers
// name what failed, never a secret, a signature, an address or the body.
//
// What each receiver checks, and what its provider's scheme cannot
// protect against:
//
//   - Resend (Svix): HMAC-SHA256 of "svix-id.svix-timestamp.body" with
//     one of the configured whsec_ secrets, among the space-separated v1
//     signatures of svix-signature; svix-timestamp within
//     [ResendConfig.Tolerance] (five minutes) both ways. A replay within
//     the tolerance passes, and becomes a duplicate by its svix-id.
//   - Postmark: nothing is signed. The basic-auth credentials of the
//     webhook URL are compared with the configured ones. Anyone who
//     learns the URL can post any report, at any time: keep it secret,
//     HTTPS only, and rotate the credentials when it may have leaked.
//   - Amazon SES through SNS: the SNS message's signature (version 1,
//     SHA1withRSA, or 2, SHA256withRSA) over SNS's canonical string, with
//     a certificate fetched only over HTTPS from a host matching
//     [SESConfig.CertHost], cached; the TopicArn against
//     [SESConfig.TopicARNs] before anything is fetched; the Timestamp
//     within [SESConfig.Tolerance] (an hour). SNS signs the fields, not
//     the body: other JSON around them is not covered. Subscriptions are
//     confirmed only for an allowed topic. Raw message delivery must be
//     off: a raw message carries no signature.
//   - SendGrid: the ECDSA P-256 signature of timestamp + body with a
//     configured public key; the timestamp within
//     [SendGridConfig.Tolerance] (ten minutes).
//   - Twilio: HMAC-SHA1 with a configured auth token over
//     [TwilioConfig.URL] and the sorted POST parameters. The scheme has no
//     timestamp: a captured request can be replayed at any time. A replay
//     is a duplicate by its MessageSid while the dispatcher keeps the
//     report's inbox claim (InboxRetention, 28 days by default); later it
//     is applied again, so a replayed START lifts a STOP sent since. Keep
//     the receiver's requests out of logs, as its auth token. JSON bodies
//     (bodySHA256) are not taken.
//
// Expo has no webhook: [Expo.Receipts] fetches push receipts for ticket
// ids and returns their reports, for a service to poll.
//
// # Classes
//
// A report's [Class] is decided by a pure function per provider from the
// provider's documented values (each function's comment cites them), by
// these rules:
//
//   - only the address that failed is concerned: where a provider reports
//     a failure for a message with several recipients without saying
//     which (Resend), the report names no address;
//   - a transient bounce is [ClassTransient], never permanent; a later
//     layer may count them. SES and Resend's Undetermined is transient;
//   - a complaint is [ClassComplaint]; a not-spam report is
//     [ClassNone];
//   - a problem on the sender's side (credentials, content filtering,
//     reputation, authentication, payload size, send rate) is
//     [ClassOurSide], which never concerns the person: Twilio 30007,
//     SendGrid blocked, Expo InvalidCredentials, MessageTooBig and
//     MessageRateExceeded, SES delays of type IPFailure, SpamDetected,
//     InternalFailure and SendingDeferral among others;
//   - a push token is [ClassPermanent] only on DeviceNotRegistered;
//   - an unsubscribe ([ClassUnsubscribe]) can be undone only by the
//     person ([ClassResubscribe]: Twilio START, a SendGrid group
//     resubscribe); a Postmark reactivation, which only the sender makes,
//     is [ClassNone];
//   - an event this package does not know is [ClassNone], not an error,
//     so that the provider does not send it again forever.
//
// # Reason codes
//
// [Report.Code] is one of the Code constants ("bounce.permanent",
// "bounce.transient", "bounce.undetermined", "bounce.content",
// "bounce.blocked", "auth_failure", "delivery.delayed", "complaint",
// "complaint.not_spam", "unsubscribe", "unsubscribe.group",
// "resubscribe", "resubscribe.group", "delivered", "engaged", "dropped",
// "send.failed", "ignored"), or "twilio." and Twilio's error code
// ("twilio.30007"), or "expo." and Expo's error in snake case
// ("expo.device_not_registered", "expo.message_too_big").
//
// # Personal data
//
// [Report.Address] is personal data; [NormalizeAddress] documents how it
// is normalised (a mail address is lower-cased whole). Event ids never
// hold an address: where a provider gives no id, one is derived by a
// hash. [Report.Detail] is built from the provider's enumerated values
// only, never from its free text, which can quote the address. Nothing in
// this package logs a report.
package feedback
