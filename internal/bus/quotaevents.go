package bus

// Quota crossings: what a server tells the worker when a decision moves a
// consumer key's calendar quota past a whole percent of its limit. The
// worker turns the crossings into webhook events (quota.threshold, and
// quota.reset once a period that reached 100 % ends), each once per key,
// limit, period and threshold, however many servers report it.
const (
	// QuotaStream carries batches of quota crossings (work-queue retention,
	// like the state and counter streams).
	QuotaStream = "SLUICE_QUOTA"
	// QuotaSubjectPrefix + node id is where one server publishes its batches.
	QuotaSubjectPrefix = "sluice.quota."
	quotaSubjects      = "sluice.quota.>"
)

// QuotaCrossing is one decision that moved a key's use of one calendar
// limit from Before to After units (Before < After), in the period
// [PeriodStart, PeriodEnd). The worker finds each threshold t (percent)
// with Before < t·Quota/100 ≤ After.
type QuotaCrossing struct {
	TenantID    string `json:"t"`
	KeyID       string `json:"k"`
	Policy      string `json:"p"`  // the policy's name
	Limit       string `json:"l"`  // the limit's name ("" for a tier's only limit)
	Calendar    string `json:"c"`  // day, week, month or year
	Quota       int64  `json:"q"`  // the limit
	Before      int64  `json:"b"`  // units used before the decision
	After       int64  `json:"a"`  // units used after it
	PeriodStart int64  `json:"ps"` // unix seconds
	PeriodEnd   int64  `json:"pe"` // unix seconds
	At          int64  `json:"at"` // unix nanoseconds of the decision
}

// QuotaBatch is one message on the quota stream.
type QuotaBatch struct {
	V         int             `json:"v"`
	Node      string          `json:"node"`
	Crossings []QuotaCrossing `json:"crossings"`
}
