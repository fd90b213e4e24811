package bus

// Quota crossings: what a server tells the worker when a decision moves a
// consumer key's calendar quota past a whole percent of its limit. The
// worker turns the crossings into webhook events (quota.threshold, and
// quota.reset once a period that reached 100 % ends), each once per key,
// limit, period and threshold, however many servers report it.

import "github.com/sluicehq/sluice/internal/tenants"

const (
	// QuotaStream carries batches of quota crossings (work-queue retention,
	// like the state and counter streams).
	QuotaStream = "SLUICE_QUOTA"
	// QuotaSubjectPrefix + node id is where one server publishes its batches.
	QuotaSubjectPrefix = "sluice.quota."
	quotaSubjects      = "sluice.quota.>"
)

// QuotaCrossing is one decision that moved a key's use of one calendar
// limit past a threshold's worth of units: tenants.QuotaCrossing, sent as
// it is.
type QuotaCrossing = tenants.QuotaCrossing

// QuotaBatch is one message on the quota stream.
type QuotaBatch struct {
	V         int             `json:"v"`
	Node      string          `json:"node"`
	Crossings []QuotaCrossing `json:"crossings"`
}
