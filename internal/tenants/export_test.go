package tenants

// HoldPasswordSlots takes every password slot of s until release is
// called, so a test can tell which calls reach password work.
func HoldPasswordSlots(s *Store) (release func()) {
	n := cap(s.passwords.slots)
	for range n {
		s.passwords.slots <- struct{}{}
	}
	return func() {
		for range n {
			<-s.passwords.slots
		}
	}
}
