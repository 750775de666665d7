package workspace

// SetGitFault replaces the crash seam of git workspace creation for the
// tests of package gitws, and returns a function that puts it back.
func SetGitFault(f func(step string)) (restore func()) {
	old := gitFault
	gitFault = f
	return func() { gitFault = old }
}
