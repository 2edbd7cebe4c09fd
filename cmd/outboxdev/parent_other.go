//go:build !linux

package main

// dieWithParent does nothing where prctl does not exist.
func dieWithParent() {}
