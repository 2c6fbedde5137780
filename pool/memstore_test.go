package pool_test

import (
	"testing"

	"idlepool/pool"
	"idlepool/pool/pooltest"
)

func TestSchedMemStoreConformance(t *testing.T) {
	pooltest.StoreConformance(t, func(t *testing.T) (pool.Store, func(pool.Store) pool.Store) {
		return pool.NewMemStore(), func(s pool.Store) pool.Store { return s }
	})
}
