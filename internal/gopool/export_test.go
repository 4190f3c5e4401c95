package gopool

// Live is how many goroutines p has, running a function or idle.
func (p *Pool) Live() int { return int(p.live.Load()) }

// Idle is how many goroutines of p wait for work.
func (p *Pool) Idle() int { return int(p.waiting.Load()) }
