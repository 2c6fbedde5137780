package p2p

import (
	"fmt"
	"net"

	"github.com/pion/transport/v5"
	"github.com/pion/transport/v5/stdnet"
)

// udpBufferBytes is the socket buffer asked for on every UDP socket ICE
// opens. The system default (about 208 KiB on Linux) overflows under a
// data channel at full speed even on loopback; each lost datagram makes
// SCTP halve its window or wait for a retransmission timeout. The kernel
// caps the request at net.core.rmem_max / wmem_max.
const udpBufferBytes = 4 << 20

// bufferedNet is the standard network whose UDP sockets get larger
// buffers.
type bufferedNet struct {
	*stdnet.Net
}

func newBufferedNet() (transport.Net, error) {
	n, err := stdnet.NewNet()
	if err != nil {
		return nil, fmt.Errorf("p2p: network interfaces: %w", err)
	}
	return bufferedNet{n}, nil
}

func (n bufferedNet) ListenUDP(network string, laddr *net.UDPAddr) (transport.UDPConn, error) {
	c, err := n.Net.ListenUDP(network, laddr)
	if err == nil {
		c.SetReadBuffer(udpBufferBytes)
		c.SetWriteBuffer(udpBufferBytes)
	}
	return c, err
}

func (n bufferedNet) ListenPacket(network, address string) (net.PacketConn, error) {
	c, err := n.Net.ListenPacket(network, address)
	if u, ok := c.(*net.UDPConn); ok && err == nil {
		u.SetReadBuffer(udpBufferBytes)
		u.SetWriteBuffer(udpBufferBytes)
	}
	return c, err
}
