// Command tlogcheck reads a transparency log published as C2SP tlog-checkpoint and
// tlog-tiles over HTTP, and checks it with Go's golang.org/x/mod/sumdb/note and
// golang.org/x/mod/sumdb/tlog: implementations this project did not write.
//
//	tlogcheck -url BASE -vkey VKEY [-old CHECKPOINT_FILE]...
//
// It fetches BASE/checkpoint, verifies the log's signature with note.Open, parses the
// origin, size and root, and then, reading tiles through a tlog.TileReader over the C2SP
// paths (tile/<L>/<N>[.p/<W>], with no height element, unlike sumdb's tile/8/...):
//
//   - tlog.TreeHash over the tiles equals the checkpoint's root;
//   - every entry of every bundle (tile/entries/<N>[.p/<W>]) hashes (tlog.RecordHash) to
//     its level-0 hash;
//   - a few inclusion proofs (tlog.ProveRecord, tlog.CheckRecord) hold;
//   - for every -old checkpoint (signed by the same key), a consistency proof
//     (tlog.ProveTree, tlog.CheckTree) shows the current tree extends it.
//
// A partial tile that is gone is read as the prefix of the full one, as tlog-tiles allows.
// Exit status: 0 all holds (one summary line on stdout), 1 something does not verify,
// 2 it could not run (bad arguments, the log unreachable); a message on stderr.
//
// tests/test_log_faults.py builds it offline against the x/mod sources Debian ships
// (golang-golang-x-mod-dev), in GOPATH mode:
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOPROXY=off go build -o tlogcheck .
//
// With a module proxy at hand, go.mod names the same module: go mod tidy && go build.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

const (
	tileHeight = 8
	tileWidth  = 1 << tileHeight
)

// errCannot marks an error that stopped the check before it could decide (exit 2).
var errCannot = errors.New("cannot check")

type checkpoint struct {
	origin string
	tree   tlog.Tree
}

type oldFlags []string

func (o *oldFlags) String() string     { return strings.Join(*o, ",") }
func (o *oldFlags) Set(v string) error { *o = append(*o, v); return nil }

func main() {
	base := flag.String("url", "", "the log's prefix URL (where checkpoint and tile/ are)")
	vkey := flag.String("vkey", "", "the log's verifier key (signed-note form)")
	var olds oldFlags
	flag.Var(&olds, "old", "an older checkpoint file the log must be consistent with (repeatable)")
	flag.Parse()
	if *base == "" || *vkey == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: tlogcheck -url BASE -vkey VKEY [-old CHECKPOINT_FILE]...")
		os.Exit(2)
	}
	summary, err := run(strings.TrimRight(*base, "/"), *vkey, olds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tlogcheck:", err)
		if errors.Is(err, errCannot) {
			os.Exit(2)
		}
		os.Exit(1)
	}
	fmt.Println(summary)
}

func run(base, vkey string, olds []string) (string, error) {
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return "", fmt.Errorf("%w: the verifier key: %v", errCannot, err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	raw, err := fetch(client, base+"/checkpoint")
	if err != nil {
		return "", err
	}
	if raw == nil {
		return "", fmt.Errorf("%w: no checkpoint at %s/checkpoint", errCannot, base)
	}
	current, err := openCheckpoint(raw, verifier)
	if err != nil {
		return "", fmt.Errorf("the checkpoint: %v", err)
	}
	size := current.tree.N
	reader := &tileReader{base: base, client: client}
	hashes := tlog.TileHashReader(current.tree, reader)
	if size == 0 {
		if current.tree.Hash != tlog.Hash(sha256.Sum256(nil)) {
			return "", errors.New("the empty tree's root is not SHA-256 of nothing")
		}
	} else {
		root, err := tlog.TreeHash(size, hashes)
		if err != nil {
			return "", fmt.Errorf("the tree hash over the tiles: %v", err)
		}
		if root != current.tree.Hash {
			return "", fmt.Errorf("the tiles hash to %v, the checkpoint says %v", root, current.tree.Hash)
		}
	}
	entries, err := checkEntries(reader, hashes, size)
	if err != nil {
		return "", err
	}
	proved := 0
	for _, index := range sampleIndexes(size) {
		record := tlog.RecordHash(entries[index])
		proof, err := tlog.ProveRecord(size, index, hashes)
		if err != nil {
			return "", fmt.Errorf("an inclusion proof of entry %d: %v", index, err)
		}
		if err := tlog.CheckRecord(proof, size, current.tree.Hash, index, record); err != nil {
			return "", fmt.Errorf("the inclusion proof of entry %d does not hold: %v", index, err)
		}
		proved++
	}
	for _, path := range olds {
		data, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%w: %v", errCannot, err)
		}
		old, err := openCheckpoint(data, verifier)
		if err != nil {
			return "", fmt.Errorf("the older checkpoint %s: %v", path, err)
		}
		if err := checkConsistent(old, current, hashes); err != nil {
			return "", fmt.Errorf("the older checkpoint %s (size %d): %v", path, old.tree.N, err)
		}
	}
	return fmt.Sprintf("ok origin=%s size=%d root=%s entries=%d inclusion=%d consistency=%d",
		current.origin, size, current.tree.Hash, len(entries), proved, len(olds)), nil
}

// openCheckpoint verifies the log's signature (note.Open) and parses the checkpoint body:
// origin (the key's name), decimal size, base64 root, optional extension lines.
func openCheckpoint(data []byte, verifier note.Verifier) (checkpoint, error) {
	n, err := note.Open(data, note.VerifierList(verifier))
	if err != nil {
		return checkpoint{}, fmt.Errorf("the log's signature: %v", err)
	}
	lines := strings.Split(n.Text, "\n")
	if len(lines) < 4 || lines[len(lines)-1] != "" {
		return checkpoint{}, errors.New("a checkpoint is at least three lines")
	}
	if lines[0] != verifier.Name() {
		return checkpoint{}, fmt.Errorf("origin %q is not the key's name %q", lines[0], verifier.Name())
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return checkpoint{}, fmt.Errorf("bad size %q", lines[1])
	}
	root, err := base64.StdEncoding.DecodeString(lines[2])
	if err != nil || len(root) != tlog.HashSize {
		return checkpoint{}, fmt.Errorf("bad root %q", lines[2])
	}
	var hash tlog.Hash
	copy(hash[:], root)
	return checkpoint{origin: lines[0], tree: tlog.Tree{N: size, Hash: hash}}, nil
}

func checkConsistent(old, current checkpoint, hashes tlog.HashReader) error {
	if old.tree.N > current.tree.N {
		return fmt.Errorf("it is larger than the current tree (%d)", current.tree.N)
	}
	if old.tree.N == 0 {
		if old.tree.Hash != tlog.Hash(sha256.Sum256(nil)) {
			return errors.New("the empty tree's root is not SHA-256 of nothing")
		}
		return nil
	}
	proof, err := tlog.ProveTree(current.tree.N, old.tree.N, hashes)
	if err != nil {
		return fmt.Errorf("no consistency proof: %v", err)
	}
	if err := tlog.CheckTree(proof, current.tree.N, current.tree.Hash, old.tree.N, old.tree.Hash); err != nil {
		return fmt.Errorf("the current tree does not extend it: %v", err)
	}
	return nil
}

// checkEntries reads every entry bundle and checks each entry's record hash against the
// level-0 hashes the (authenticated) tiles hold. It returns the entries.
func checkEntries(reader *tileReader, hashes tlog.HashReader, size int64) ([][]byte, error) {
	var entries [][]byte
	for n := int64(0); n*tileWidth < size; n++ {
		width := int(minInt64(tileWidth, size-n*tileWidth))
		bundle, err := reader.read("entries", n, width)
		if err != nil {
			return nil, err
		}
		records, err := splitBundle(bundle)
		if err != nil {
			return nil, fmt.Errorf("entry bundle %d: %v", n, err)
		}
		if len(records) < width {
			return nil, fmt.Errorf("entry bundle %d holds %d entries, not %d", n, len(records), width)
		}
		records = records[:width]
		indexes := make([]int64, width)
		for i := range records {
			indexes[i] = tlog.StoredHashIndex(0, n*tileWidth+int64(i))
		}
		leaves, err := hashes.ReadHashes(indexes)
		if err != nil {
			return nil, fmt.Errorf("the level-0 hashes of bundle %d: %v", n, err)
		}
		for i, record := range records {
			if tlog.RecordHash(record) != leaves[i] {
				return nil, fmt.Errorf("entry %d does not hash to its level-0 hash", n*tileWidth+int64(i))
			}
		}
		entries = append(entries, records...)
	}
	return entries, nil
}

// splitBundle parses a C2SP entry bundle: each entry a big-endian uint16 length and its bytes.
func splitBundle(data []byte) ([][]byte, error) {
	var out [][]byte
	for len(data) > 0 {
		if len(data) < 2 {
			return nil, errors.New("a truncated length")
		}
		length := int(data[0])<<8 | int(data[1])
		if len(data) < 2+length {
			return nil, errors.New("a truncated entry")
		}
		out = append(out, data[2:2+length])
		data = data[2+length:]
	}
	return out, nil
}

// sampleIndexes: the first and last entries, both sides of each tile boundary, the middle.
func sampleIndexes(size int64) []int64 {
	seen := map[int64]bool{}
	var out []int64
	for _, i := range []int64{0, 1, tileWidth - 1, tileWidth, size / 2, size - 2, size - 1} {
		if i >= 0 && i < size && !seen[i] {
			seen[i] = true
			out = append(out, i)
		}
	}
	return out
}

// tileReader implements tlog.TileReader over the C2SP tlog-tiles paths under base.
type tileReader struct {
	base   string
	client *http.Client
}

func (r *tileReader) Height() int { return tileHeight }

func (r *tileReader) ReadTiles(tiles []tlog.Tile) ([][]byte, error) {
	out := make([][]byte, len(tiles))
	for i, t := range tiles {
		if t.H != tileHeight || t.L < 0 {
			return nil, fmt.Errorf("unexpected tile %+v", t)
		}
		data, err := r.read(strconv.Itoa(t.L), t.N, t.W)
		if err != nil {
			return nil, err
		}
		if len(data) < t.W*tlog.HashSize {
			return nil, fmt.Errorf("tile %s holds %d bytes, not %d", tilePath(strconv.Itoa(t.L), t.N, t.W), len(data), t.W*tlog.HashSize)
		}
		out[i] = data[:t.W*tlog.HashSize]
	}
	return out, nil
}

func (r *tileReader) SaveTiles([]tlog.Tile, [][]byte) {}

// read fetches tile/<level>/<N>[.p/<W>], else the full tile (a partial one may be gone once
// the full one exists). Hash tiles are returned as stored; the caller cuts them to width.
func (r *tileReader) read(level string, n int64, width int) ([]byte, error) {
	path := tilePath(level, n, width)
	data, err := fetch(r.client, r.base+"/"+path)
	if err != nil {
		return nil, err
	}
	if data == nil && width < tileWidth {
		data, err = fetch(r.client, r.base+"/"+tilePath(level, n, tileWidth))
		if err != nil {
			return nil, err
		}
	}
	if data == nil {
		return nil, fmt.Errorf("%s is missing", path)
	}
	return data, nil
}

// tilePath names a tile as C2SP tlog-tiles does: tile/<L>/<N>[.p/<W>], N in groups of three
// digits with an x before every group but the last (1234067 is x001/x234/067).
func tilePath(level string, n int64, width int) string {
	index := fmt.Sprintf("%03d", n%1000)
	for n >= 1000 {
		n /= 1000
		index = fmt.Sprintf("x%03d/", n%1000) + index
	}
	path := "tile/" + level + "/" + index
	if width < tileWidth {
		path += ".p/" + strconv.Itoa(width)
	}
	return path
}

// fetch GETs url: its body, nil on 404, an error otherwise.
func fetch(client *http.Client, url string) ([]byte, error) {
	response, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCannot, err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %s: %v", errCannot, url, err)
	}
	if response.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if response.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: GET %s: %s: %s", errCannot, url, response.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

func minInt64(a, b int64) int64 {
	if a < b {
		return a
	}
	return b
}
