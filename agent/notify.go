package agent

import "sync"

// changeNotifier tells whoever waits that something changed: wait returns
// a channel that notify closes (and replaces with a new one), so that any
// number of readers each see the next change. Safe for concurrent use.
type changeNotifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newChangeNotifier() *changeNotifier { return &changeNotifier{ch: make(chan struct{})} }

// wait returns the channel the next notify closes.
func (n *changeNotifier) wait() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

// notify closes the channel of wait and makes a new one.
func (n *changeNotifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

// Changes returns a channel that is closed at the next change of what
// Status says in a few words: the policy's decision turning to another
// state (computing, waiting, paused), tasks suspended or resumed, a task
// starting or ending, a pool becoming unreachable or reachable again.
// Call it again for the change after. The tray app refreshes its status
// line on it instead of at its next periodic read, so that the line
// follows a game starting or the owner's Resume as the workers do. Counts
// that change with every sample (seconds idle, the reason's wording) do
// not close it. Safe for concurrent use.
func (d *Donor) Changes() <-chan struct{} { return d.changes.wait() }

// changed is what a donor's policy and agents call on such a change.
func (d *Donor) changed() { d.changes.notify() }

// wakeGovernor makes the agent's governor sample and decide now instead
// of at the end of its period (after the owner's settings changed).
func (a *Agent) wakeGovernor() {
	select {
	case a.gov.wake <- struct{}{}:
	default:
	}
}

// noteChange calls Config.changed, if set.
func (a *Agent) noteChange() {
	if a.cfg.changed != nil {
		a.cfg.changed()
	}
}
