package local

// setAside sets aside units as a lapse would, unless the entry is gone,
// and reports whether it took them.
func (e *Entry[P]) setAside(units, at, now int64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone.Load() {
		return false
	}
	e.setAsideLocked(units, at, now)
	return true
}
