#include "textflag.h"

// func memorySize() int32: the guest's linear memory in 64 KiB pages.
TEXT ·memorySize(SB), NOSPLIT, $0-4
	Get SP
	CurrentMemory
	I32Store ret+0(FP)
	RET
