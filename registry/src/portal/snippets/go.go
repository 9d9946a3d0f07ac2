// Calls {{API_ID}} ({{METHOD}} {{PATH}}) through a Portico gateway, signed as the signing
// guide says (the developer portal's Signing page). Go 1.17+, standard library only:
//
//	PORTICO_APP_KEY=<app key> PORTICO_SECRET=<secret> go run call.go
//
// PORTICO_BASE_URL overrides the gateway address. PORTICO_TIMESTAMP and PORTICO_NONCE fix the
// signed values, to compare with the guide's worked examples (leave them unset otherwise).
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

const (
	method = "{{METHOD}}"
	target = {{TARGET}} // the path and query, exactly as sent (percent-encoded)
	body   = {{BODY}}   // the exact bytes sent and signed
	signed = {{SIGNED}} // false: a public API (auth none), no signature needed
)

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func kept(b byte) bool {
	return (b >= 'A' && b <= 'Z') || (b >= 'a' && b <= 'z') || (b >= '0' && b <= '9') ||
		b == '-' || b == '_' || b == '.' || b == '~'
}

func isHex(b byte) bool {
	return (b >= '0' && b <= '9') || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F')
}

// reencode percent-decodes to bytes ('+' stays '+'; an invalid escape stays as it is), then
// keeps only A-Z a-z 0-9 - _ . ~ and writes every other byte as %XX (upper-case hex).
func reencode(text string) string {
	var raw []byte
	for i := 0; i < len(text); i++ {
		if text[i] == '%' && i+2 < len(text) && isHex(text[i+1]) && isHex(text[i+2]) {
			v, _ := strconv.ParseUint(text[i+1:i+3], 16, 8)
			raw = append(raw, byte(v))
			i += 2
		} else {
			raw = append(raw, text[i])
		}
	}
	var out strings.Builder
	for _, b := range raw {
		if kept(b) {
			out.WriteByte(b)
		} else {
			fmt.Fprintf(&out, "%%%02X", b)
		}
	}
	return out.String()
}

func canonicalQuery(query string) string {
	var pairs [][2]string
	for _, part := range strings.Split(query, "&") {
		if part == "" {
			continue
		}
		name, value := part, ""
		if i := strings.IndexByte(part, '='); i >= 0 {
			name, value = part[:i], part[i+1:]
		}
		pairs = append(pairs, [2]string{reencode(name), reencode(value)})
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i][0] != pairs[j][0] {
			return pairs[i][0] < pairs[j][0]
		}
		return pairs[i][1] < pairs[j][1]
	})
	joined := make([]string, len(pairs))
	for i, p := range pairs {
		joined[i] = p[0] + "=" + p[1]
	}
	return strings.Join(joined, "&")
}

func main() {
	baseURL := strings.TrimRight(env("PORTICO_BASE_URL", "{{BASE_URL}}"), "/")
	appKey := env("PORTICO_APP_KEY", "{{APP_KEY}}")
	secret := env("PORTICO_SECRET", "")
	path, query := target, ""
	if i := strings.IndexByte(target, '?'); i >= 0 {
		path, query = target[:i], target[i+1:]
	}
	req, err := http.NewRequest(method, baseURL+target, bytes.NewReader([]byte(body)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if signed {
		if secret == "" {
			fmt.Fprintln(os.Stderr, "set PORTICO_SECRET (and PORTICO_APP_KEY) to your app's secret and key")
			os.Exit(2)
		}
		ts := env("PORTICO_TIMESTAMP", strconv.FormatInt(time.Now().UnixMilli(), 10))
		random := make([]byte, 12)
		if _, err := rand.Read(random); err != nil {
			panic(err)
		}
		nonce := env("PORTICO_NONCE", base64.RawURLEncoding.EncodeToString(random))
		bodyHash := sha256.Sum256([]byte(body))
		stringToSign := strings.Join([]string{method, path, canonicalQuery(query), appKey, ts, nonce,
			hex.EncodeToString(bodyHash[:])}, "\n")
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(stringToSign))
		req.Header.Set("X-Portico-AppKey", appKey)
		req.Header.Set("X-Portico-Timestamp", ts)
		req.Header.Set("X-Portico-Nonce", nonce)
		req.Header.Set("X-Portico-Signature", hex.EncodeToString(mac.Sum(nil)))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	fmt.Printf("HTTP %d\n%s\n", resp.StatusCode, answer)
	if resp.StatusCode >= 400 {
		os.Exit(1)
	}
}
