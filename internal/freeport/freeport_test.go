package freeport

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAddrIsALoopbackAddressNothingListensOn(t *testing.T) {
	addr, err := Addr()
	require.NoError(t, err)
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "nothing listens there")
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err, "a process can listen there")
	require.NoError(t, l.Close())
}
