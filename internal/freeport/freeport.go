// Package freeport finds a local TCP address nothing listens on: one for a process to be
// started to listen on, or one where a dial is refused.
package freeport

import "net"

// Addr is a loopback address ("127.0.0.1:port") that nothing listened on when it returned.
func Addr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", err
	}
	return addr, nil
}
