package coord

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestPoolRefusesTooOldAgents: a pool with a minimum version says it in
// GET /v1/pool and answers an older device 426 "agent_too_old" with the
// words its owner sees; a device new enough passes on to the usual checks.
func TestPoolRefusesTooOldAgents(t *testing.T) {
	ts := startServer(t, func(c *Config) {
		c.MinAgentVersion, c.MinAPIVersion, c.LatestAgentVersion = "1.4.0", 3, "1.5.2"
	})
	resp, err := ts.client.Get(ts.URL() + "/v1/pool")
	if err != nil {
		t.Fatal(err)
	}
	var info PoolInfo
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info.MinAgent != "1.4.0" || info.MinAPI != 3 || info.LatestAgent != "1.5.2" || info.Version != APIVersion {
		t.Fatalf("pool info = %+v, %v", info, err)
	}
	api := strconv.Itoa(APIVersion)
	for _, tc := range []struct {
		name, version, api string
		tooOld             bool
	}{
		{"older", "1.3.9", api, true},
		{"no version (an older client)", "", "", true},
		{"a build without a version", "dev", api, true},
		{"API too old", "1.4.0", "2", true},
		{"new enough", "1.4.0", api, false},
		{"newer", "2.0.1", api, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/peers", "/v1/work"} {
				req, _ := http.NewRequest(http.MethodPost, ts.URL()+path, strings.NewReader("{}"))
				if tc.version != "" {
					req.Header.Set(VersionHeader, tc.version)
				}
				if tc.api != "" {
					req.Header.Set(APIHeader, tc.api)
				}
				resp, err := ts.client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var body ErrorBody
				json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if got := resp.StatusCode == http.StatusUpgradeRequired && body.Code == CodeAgentTooOld; got != tc.tooOld {
					t.Errorf("%s: %d %+v; want too old %v", path, resp.StatusCode, body, tc.tooOld)
				}
				if tc.tooOld && body.Error != "this pool needs idlepool 1.4 or newer" {
					t.Errorf("%s: words %q", path, body.Error)
				}
			}
		})
	}
}

func TestVersionsConfig(t *testing.T) {
	for _, c := range []Config{
		{MinAgentVersion: "1.4"},
		{MinAgentVersion: "one"},
		{LatestAgentVersion: "dev"},
		{MinAPIVersion: APIVersion + 1},
		{MinAgentVersion: "2.0.0", LatestAgentVersion: "1.9.0"},
	} {
		c.DataDir = t.TempDir()
		err := c.Validate()
		if c.MinAgentVersion == "1.4" {
			if err != nil {
				t.Errorf("%+v: %v, want it accepted (1.4 is 1.4.0)", c, err)
			}
			continue
		}
		if !errors.Is(err, ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig", c, err)
		}
	}
}
