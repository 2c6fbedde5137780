package app

// Notifier is an Engine that says when its status changed in a way the
// tray shows (agent.Donor's Changes): the policy's decision turning to
// another state, tasks starting, ending, suspended or resumed, a pool
// lost or found. The tray refreshes at once on it, so that its line
// follows a game starting or the owner's Resume as the workers do,
// instead of at its next periodic refresh (TrayRefresh). An Engine
// without it (the window process's, over the local API) is refreshed
// periodically only.
type Notifier interface {
	// Changes returns a channel closed at the next change; call it again
	// after each.
	Changes() <-chan struct{}
}

// changesOf returns the engine's next change, or nil (never) for an
// engine that does not tell.
func changesOf(e Engine) <-chan struct{} {
	if n, ok := e.(Notifier); ok {
		return n.Changes()
	}
	return nil
}
