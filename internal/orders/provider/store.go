package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Store key prefixes.
const (
	storeShipments = "provider/shipment/"
	storeKeys      = "provider/key/"
)

// storedKey is a stored Idempotency-Key answer.
type storedKey struct {
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"` // hex SHA-256 of method, path and body
	Status      int    `json:"status"`
	Body        []byte `json:"body"`
}

// storedShipment is a shipment as kept, with the key answer that created
// it (empty without a key): one record, so a kill cannot keep a shipment
// without the answer its key must replay.
type storedShipment struct {
	Shipment  Shipment  `json:"shipment"`
	CreatedBy storedKey `json:"created_by,omitzero"`
}

// fingerprint identifies a request for its Idempotency-Key: method, path
// and body.
func (x *exchange) fingerprint() [32]byte {
	return sha256.Sum256(append([]byte(x.r.Method+" "+x.r.URL.Path+"\n"), x.body...))
}

func hexFP(fp [32]byte) string { return hex.EncodeToString(fp[:]) }

// keepShipment writes sh (and the answer that created it) to the Store.
func (s *Server) keepShipment(sh Shipment, by storedKey) error {
	if s.cfg.Store == nil {
		return nil
	}
	b, err := json.Marshal(storedShipment{Shipment: sh, CreatedBy: by})
	if err == nil {
		err = s.cfg.Store.Put(storeShipments+sh.ID, b)
	}
	if err != nil {
		return fmt.Errorf("provider: could not keep shipment %s: %w", sh.ID, err)
	}
	return nil
}

// keepKey writes a key's answer to the Store.
func (s *Server) keepKey(key string, k storedKey) error {
	if s.cfg.Store == nil {
		return nil
	}
	b, err := json.Marshal(k)
	if err == nil {
		err = s.cfg.Store.Put(storeKeys+key, b)
	}
	if err != nil {
		return fmt.Errorf("provider: could not keep the answer of key %q: %w", key, err)
	}
	return nil
}

// restore loads the kept shipments and key answers; shipment numbers
// continue after the highest kept.
func (s *Server) restore() error {
	keep := func(k storedKey) error {
		fp, err := hex.DecodeString(k.Fingerprint)
		if err != nil || len(fp) != 32 {
			return fmt.Errorf("provider: stored key %q: bad fingerprint", k.Key)
		}
		kd := &keyed{done: true, status: k.Status, body: k.Body}
		copy(kd.fingerprint[:], fp)
		s.keys[k.Key] = kd
		return nil
	}
	var all []Shipment
	for name, b := range s.cfg.Store.Records(storeShipments) {
		var st storedShipment
		if err := json.Unmarshal(b, &st); err != nil {
			return fmt.Errorf("provider: stored shipment %s: %w", name, err)
		}
		sh := st.Shipment
		s.shipments[sh.ID] = &sh
		s.createdBy[sh.ID] = st.CreatedBy
		all = append(all, sh)
		if st.CreatedBy.Key != "" {
			if err := keep(st.CreatedBy); err != nil {
				return err
			}
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(sh.ID, "shp_")); err == nil && n > s.nextID {
			s.nextID = n
		}
	}
	for name, b := range s.cfg.Store.Records(storeKeys) {
		var k storedKey
		if err := json.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("provider: stored key %s: %w", name, err)
		}
		if err := keep(k); err != nil {
			return err
		}
	}
	sort.Slice(all, func(i, j int) bool {
		if !all[i].CreatedAt.Equal(all[j].CreatedAt) {
			return all[i].CreatedAt.Before(all[j].CreatedAt)
		}
		return all[i].ID < all[j].ID
	})
	for _, sh := range all {
		s.order = append(s.order, sh.ID)
	}
	return nil
}
