// Package console is the operators' web page of tidings: an http.Handler
// that a service mounts on its own mux, behind its own authentication, to
// see and mend what its notification.Client sees.
//
// Its pages:
//
//   - the overview: per module and channel, the requests due now and
//     scheduled, how long the oldest due one has waited, and the dead
//     ones (Client.Stats);
//   - the dead requests, grouped by the code of their reason, each group
//     listed a page at a time, with re-emit for a selection or for the
//     whole group (Client.ListDead, Client.Reemit);
//   - one request, with its timeline, and cancel or re-emit where its
//     state allows (Client.Status, Client.Cancel);
//   - search by request id or correlation id (Client.FindByCorrelation).
//
// The pages are rendered on the server with html/template from templates
// and a style sheet embedded in the binary: no build step, no CDN, and
// every page and action works without JavaScript (a few lines of it add a
// "select all" box to the dead lists).
//
// What it protects:
//
//   - Recipients are personal data: a page shows each masked
//     (a***@example.com, +1415*****00, https://hooks.example.com/***)
//     unless Options.ShowRecipients says otherwise. The timelines hold
//     no recipient.
//   - Every change is a POST checked twice against cross-site forgery:
//     http.CrossOriginProtection (Sec-Fetch-Site, or Origin against Host)
//     and a double-submit token, an HMAC of a random cookie compared in
//     constant time. The answer of a change is a redirect to a GET
//     (post/redirect/get).
//   - Options.ReadOnly renders no form and refuses every POST.
//   - Every answer forbids framing and any script, style or form target
//     but its own (Content-Security-Policy), and is not cached.
//
// The handler has no users, sessions or log-in of its own: mount it behind
// the service's authentication. ServeLocal runs it alone on loopback, for
// a quick look.
package console
