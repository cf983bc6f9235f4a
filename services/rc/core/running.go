package core

import "math/bits"

// runningIndex finds the state of a portion a DAP of this core is executing
// by its id, so that a completion reaches its portion, request and DAP
// without hashing the DAP's or the request's id (string-keyed map lookups
// were the largest single cost of a completion). It holds exactly the
// entries of the DAPs' running lists that this core dispatched (a relayed
// portion's id is the primary's, and is not here): put at dispatch, dropped
// when the slot is freed (Core.freeSlot) or the DAP is lost.
//
// Open addressing over a power-of-two table with linear probing, the home of
// an id by Fibonacci hashing (ids from one counter, homed at id&mask, made
// one run as long as the portions in flight, and a deletion walked all of
// it); deletion shifts back the entries after it. At most half full.
type runningIndex struct {
	slots []runningSlot
	n     int
	shift uint // 64 - log2(len(slots))
}

func (x *runningIndex) home(id PortionID) uint64 { return (uint64(id) * 0x9E3779B97F4A7C15) >> x.shift }

// runningSlot is one entry; ps nil marks it empty.
type runningSlot struct {
	id PortionID
	ps *portionState
}

func (x *runningIndex) put(id PortionID, ps *portionState) {
	if 2*(x.n+1) > len(x.slots) {
		x.grow()
	}
	mask := uint64(len(x.slots) - 1)
	i := x.home(id)
	for x.slots[i].ps != nil {
		if x.slots[i].id == id {
			x.slots[i].ps = ps
			return
		}
		i = (i + 1) & mask
	}
	x.slots[i] = runningSlot{id: id, ps: ps}
	x.n++
}

// get is the portion state under id, nil when none.
func (x *runningIndex) get(id PortionID) *portionState {
	if x.n == 0 {
		return nil
	}
	mask := uint64(len(x.slots) - 1)
	for i := x.home(id); x.slots[i].ps != nil; i = (i + 1) & mask {
		if x.slots[i].id == id {
			return x.slots[i].ps
		}
	}
	return nil
}

func (x *runningIndex) del(id PortionID) {
	if x.n == 0 {
		return
	}
	mask := uint64(len(x.slots) - 1)
	i := x.home(id)
	for x.slots[i].id != id {
		if x.slots[i].ps == nil {
			return
		}
		i = (i + 1) & mask
	}
	if x.slots[i].ps == nil {
		return
	}
	// Shift back the entries of the run after i that would not be found
	// past the hole.
	for j := (i + 1) & mask; x.slots[j].ps != nil; j = (j + 1) & mask {
		home := x.home(x.slots[j].id)
		if (j-home)&mask >= (j-i)&mask {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = runningSlot{}
	x.n--
}

func (x *runningIndex) grow() {
	old := x.slots
	size := max(64, 2*len(old))
	x.slots = make([]runningSlot, size)
	x.shift = uint(64 - bits.TrailingZeros(uint(size)))
	x.n = 0
	for _, s := range old {
		if s.ps != nil {
			x.put(s.id, s.ps)
		}
	}
}
