package live

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/sg-project/sg/messages"
)

const manifestName = "manifest.json"

// cut records that the rdb's purview started at RDBStart after the message at stream
// sequence Seq (kept for the record; the last one is the rdb's start).
type cut struct {
	Seq      uint64 `json:"seq"`
	RDBStart int64  `json:"rdbStart"`
}

// manifest is the durable state of a group (see the package doc, Restart).
type manifest struct {
	Labels     string `json:"labels"`
	Generation uint64 `json:"generation"` // starts of the group; purview versions begin at Generation<<32
	HDBEnd     int64  `json:"hdbEnd"`     // rows before are in Parquet
	Cuts       []cut  `json:"cuts"`       // ascending; the last is the rdb's current start
	ReplayFrom uint64 `json:"replayFrom"` // first stream sequence that may hold rows not in Parquet
	Vintage    uint64 `json:"vintage"`    // stream sequence of the last reference update applied
}

func (m *manifest) rdbStart() int64 { return m.Cuts[len(m.Cuts)-1].RDBStart }

// prune drops the cuts that no replay from ReplayFrom can need (it keeps the one in
// effect at ReplayFrom).
func (m *manifest) prune() {
	i := sort.Search(len(m.Cuts), func(i int) bool { return m.Cuts[i].Seq >= m.ReplayFrom })
	if i > 1 {
		m.Cuts = append(m.Cuts[:0:0], m.Cuts[i-1:]...)
	}
}

func (m *manifest) validate() error {
	if len(m.Cuts) == 0 {
		return errors.New("no rdb cut")
	}
	if m.HDBEnd > m.rdbStart() {
		return fmt.Errorf("hdb end %d after the rdb start %d", m.HDBEnd, m.rdbStart())
	}
	for i := 1; i < len(m.Cuts); i++ {
		if m.Cuts[i].Seq < m.Cuts[i-1].Seq || m.Cuts[i].RDBStart < m.Cuts[i-1].RDBStart {
			return fmt.Errorf("cuts out of order at %d", i)
		}
	}
	return nil
}

// loadManifest reads the manifest; ok is false when there is none (a fresh group).
func loadManifest(dir string) (m manifest, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return manifest{}, false, nil
	}
	if err != nil {
		return manifest{}, false, fmt.Errorf("live: read manifest: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return manifest{}, false, fmt.Errorf("live: manifest %s: %w", filepath.Join(dir, manifestName), err)
	}
	if err := m.validate(); err != nil {
		return manifest{}, false, fmt.Errorf("live: manifest %s: %w", filepath.Join(dir, manifestName), err)
	}
	return m, true, nil
}

// writeAtomic writes a file by temporary name, sync and rename, then syncs the directory.
func writeAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("live: %w", err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("live: write %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func (m *manifest) save(dir string) error {
	m.prune()
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("live: encode manifest: %w", err)
	}
	return writeAtomic(filepath.Join(dir, manifestName), b)
}

// refSnapshot is the persisted content of one reference table at a stream sequence.
type refSnapshot struct {
	V    uint8          `msgpack:"v"`
	Seq  uint64         `msgpack:"seq"`
	Rows messages.Table `msgpack:"rows"`
}

func refPath(dir, table string) string { return filepath.Join(dir, "ref", table+".msgpack") }

func saveRef(dir, table string, seq uint64, rows messages.Table) error {
	if err := os.MkdirAll(filepath.Join(dir, "ref"), 0o755); err != nil {
		return fmt.Errorf("live: %w", err)
	}
	b, err := messages.Encode(&refSnapshot{V: 1, Seq: seq, Rows: rows})
	if err != nil {
		return fmt.Errorf("live: encode reference %s: %w", table, err)
	}
	return writeAtomic(refPath(dir, table), b)
}

func loadRef(dir, table string) (snap refSnapshot, ok bool, err error) {
	b, err := os.ReadFile(refPath(dir, table))
	if errors.Is(err, os.ErrNotExist) {
		return refSnapshot{}, false, nil
	}
	if err == nil {
		err = messages.DecodeLimited(b, &snap, messages.PayloadLimits) // a local file, as large as the table
	}
	if err == nil {
		err = snap.Rows.Validate()
	}
	if err != nil {
		return refSnapshot{}, false, fmt.Errorf("live: reference snapshot %s: %w", refPath(dir, table), err)
	}
	return snap, true, nil
}
