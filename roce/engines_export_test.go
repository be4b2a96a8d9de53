package roce

// SetHandSlots sets the smallest size of the engines' inboxes for devices
// made after it (tests of a full inbox); it returns the former size.
func SetHandSlots(n int) int {
	old := handSlots
	handSlots = n
	return old
}
