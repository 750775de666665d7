package api

// Statuses of a doctor check.
const (
	DoctorOK   = "ok"
	DoctorWarn = "warn"
	DoctorFail = "FAIL"
)

// DoctorCheck is one check of `substrat doctor`: what was checked, how it
// went, and how to fix it. It never holds a key's value.
type DoctorCheck struct {
	Check  string `json:"check"`
	Status string `json:"status"` // DoctorOK, DoctorWarn or DoctorFail
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
	// Where the check ran: "daemon" (in the running daemon's process)
	// or "cli" (no daemon runs: this process's environment, which a
	// daemon started from it inherits).
	Where string `json:"where"`
}

// DoctorReport is the result of daemon.doctor.
type DoctorReport struct {
	Pid    int           `json:"pid"`
	Checks []DoctorCheck `json:"checks"`
}
