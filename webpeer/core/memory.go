package main

import (
	"errors"
	"fmt"
)

// capMemory returns bin with the maximum of its memory capped at pages
// (64 KiB each), as wazero's WithMemoryLimitPages caps it for a worker:
// a module without a maximum gets pages, one with a larger maximum gets
// pages, and growing past it fails (memory.grow returns -1). A minimum
// over pages is an errOverLimit error, which a worker reports as the
// task's out-of-memory failure. A module without a memory section is
// returned as it is.
func capMemory(bin []byte, pages uint32) ([]byte, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, errors.New("not a WebAssembly module (no \\0asm magic)")
	}
	p := 8
	for p < len(bin) {
		id := bin[p]
		size, n, err := uleb(bin[p+1:])
		if err != nil {
			return nil, fmt.Errorf("section at byte %d: %w", p, err)
		}
		start := p + 1 + n
		end := start + int(size)
		if end > len(bin) || end < start {
			return nil, fmt.Errorf("section at byte %d runs past the end of the module", p)
		}
		if id != 5 {
			p = end
			continue
		}
		body := bin[start:end]
		count, q, err := uleb(body)
		if err != nil {
			return nil, fmt.Errorf("memory section: %w", err)
		}
		out := appendULEB(nil, count)
		for range count {
			if q >= len(body) {
				return nil, errors.New("memory section: truncated")
			}
			flags := body[q]
			q++
			if flags&^1 != 0 {
				return nil, fmt.Errorf("memory section: limits flags %#x (shared or 64-bit memory) are not supported", flags)
			}
			min, n, err := uleb(body[q:])
			if err != nil {
				return nil, fmt.Errorf("memory section: %w", err)
			}
			q += n
			max := uint64(pages)
			if flags == 1 {
				m, n, err := uleb(body[q:])
				if err != nil {
					return nil, fmt.Errorf("memory section: %w", err)
				}
				q += n
				max = min64(m, max)
			}
			if min > uint64(pages) {
				return nil, &overLimitError{min: min, pages: pages}
			}
			out = append(out, 1)
			out = appendULEB(out, min)
			out = appendULEB(out, max)
		}
		res := append([]byte{}, bin[:p]...)
		res = append(res, 5)
		res = appendULEB(res, uint64(len(out)))
		res = append(res, out...)
		return append(res, bin[end:]...), nil
	}
	return bin, nil
}

// overLimitError is a module whose memory minimum is over the limit; its
// message is wazero's, which the worker reports.
type overLimitError struct {
	min   uint64
	pages uint32
}

func (e *overLimitError) Error() string {
	return fmt.Sprintf("min %d pages (%s) over limit of %d pages (%s)", e.min, pagesSize(e.min), e.pages, pagesSize(uint64(e.pages)))
}

// pagesSize writes a page count as wazero does (PagesToUnitOfBytes):
// "64 Ki", "16 Mi", "4 Gi", rounded down.
func pagesSize(pages uint64) string {
	k := pages * 64
	if k < 1024 {
		return fmt.Sprintf("%d Ki", k)
	}
	if m := k / 1024; m < 1024 {
		return fmt.Sprintf("%d Mi", m)
	}
	return fmt.Sprintf("%d Gi", k/(1024*1024))
}

func min64(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return b
}

// uleb decodes an unsigned LEB128 of at most 64 bits.
func uleb(b []byte) (uint64, int, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			return v, i + 1, nil
		}
	}
	return 0, 0, errors.New("malformed LEB128 number")
}

func appendULEB(b []byte, v uint64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}
