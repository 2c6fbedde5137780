package agent

// QueuedWork returns how many calls of c wait for the next POST /v1/work.
func QueuedWork(c *Client) int {
	c.work.mu.Lock()
	defer c.work.mu.Unlock()
	return len(c.work.ops)
}
