package quota

// PeriodEnd is the instant (unix ns) the window containing now ends, for
// the window algorithms (a calendar's window, or the multiple of Period
// after now); 0 for a token bucket or a sliding log, which have no period
// to end. Usage reports call it the period's reset.
func (l *Limit) PeriodEnd(now int64) int64 {
	switch l.Algorithm {
	case FixedWindow, SlidingWindow:
	default:
		return 0
	}
	if l.Calendar != nil {
		if l.Algorithm == FixedWindow {
			_, end := l.Calendar.Window(now)
			return end
		}
		return 0
	}
	if l.Period <= 0 {
		return 0
	}
	return windowStart(now, int64(l.Period)) + int64(l.Period)
}
