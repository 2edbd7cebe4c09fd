package localrt

import "math/big"

// CompareSequenceNumbers compares two DynamoDB Streams sequence numbers as
// unsigned big integers (real ones are 21–40 decimal digits, Dynoxide's are
// short like "7"; a lexical comparison is wrong for both). It returns -1, 0
// or +1. A string that is not a decimal integer sorts before every valid one.
func CompareSequenceNumbers(a, b string) int {
	x, okA := new(big.Int).SetString(a, 10)
	y, okB := new(big.Int).SetString(b, 10)
	switch {
	case !okA && !okB:
		return 0
	case !okA:
		return -1
	case !okB:
		return 1
	}
	return x.Cmp(y)
}

// validSequenceNumber reports whether s is a non-empty decimal integer.
func validSequenceNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
