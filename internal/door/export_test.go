package door

// InFlight is how many exact decisions a Door lets go at once to one
// server before more wait to go together.
func (d *Door) InFlight() int { return d.inFlight }
