package localrt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/smithy-go"
)

// Archive limits and defaults (API_CreateArchive, eb-archive).
const (
	// DefaultArchiveDelay bounds the local delay between a bus accepting an
	// event and the event reaching an archive: each archived event becomes
	// replayable after a delay drawn uniformly from [0, ArchiveDelay].
	// EventBridge documents a delay without a bound ("there may be a delay
	// … we recommend you delay replaying archived events for 10 minutes",
	// eb-archive); locally it is 30 s by default, so a replay started
	// sooner than that misses events, as it can on AWS.
	DefaultArchiveDelay = 30 * time.Second
	// MaxArchiveNameLength is the archive name limit (1..48 characters of
	// [.\-_A-Za-z0-9], API_CreateArchive).
	MaxArchiveNameLength = 48
)

var archiveNameRE = regexp.MustCompile(`^[.\-_A-Za-z0-9]+$`)

// ArchiveConfig is an archive of a local bus, as AWS::Events::Archive or
// CreateArchive declares one: the accepted events its Pattern matches are
// kept (after the archive delay) for RetentionDays days (0: forever) and
// can be replayed to the bus's rules (StartReplay).
type ArchiveConfig struct {
	// Name is the archive name, 1..48 characters of [.\-_A-Za-z0-9].
	Name string
	// Pattern is the archive's event pattern (JSON text or a JSON-ready
	// value); nil archives every event.
	Pattern any
	// RetentionDays is how long an event is kept, in days after it was
	// archived; 0 keeps it forever (the AWS default).
	RetentionDays int32
	// Description is free text.
	Description string
}

// archive is a live archive: its config, compiled pattern and events, in
// archiving order.
type archive struct {
	cfg         ArchiveConfig
	patternJSON string
	pattern     *Pattern
	created     time.Time
	events      []archivedEvent
}

// archivedEvent is one event an archive holds.
type archivedEvent struct {
	// Time is the event's own "time" (what a replay selects on).
	Time time.Time `json:"time"`
	// ArchivedAt is when the bus accepted it; VisibleAt when the archive
	// delay lets a replay see it.
	ArchivedAt time.Time       `json:"archived_at"`
	VisibleAt  time.Time       `json:"visible_at"`
	Event      json.RawMessage `json:"event"`
}

func (b *Bus) archiveARN(name string) string {
	return fmt.Sprintf("arn:aws:events:%s:%s:archive/%s", b.cfg.Region, b.cfg.Account, name)
}

func (b *Bus) archivePrefix(name string) string { return "bus/" + b.ARN() + "/archive/" + name + "/" }

func apiErr(code string, format string, args ...any) error {
	return &smithy.GenericAPIError{Code: code, Fault: smithy.FaultClient, Message: fmt.Sprintf(format, args...)}
}

// addArchive validates and registers an archive, restoring its kept events
// from the Store. Callers hold no lock.
func (b *Bus) addArchive(cfg ArchiveConfig) (*archive, error) {
	if cfg.Name == "" || len(cfg.Name) > MaxArchiveNameLength || !archiveNameRE.MatchString(cfg.Name) {
		return nil, apiErr("ValidationException", "archive name %q: 1 to %d characters of [.-_A-Za-z0-9]", cfg.Name, MaxArchiveNameLength)
	}
	if cfg.RetentionDays < 0 {
		return nil, apiErr("ValidationException", "archive %s: RetentionDays must be 0 (forever) or more", cfg.Name)
	}
	a := &archive{cfg: cfg, created: b.cfg.Now().UTC()}
	if cfg.Pattern != nil {
		p, err := CompilePattern(cfg.Pattern)
		if err != nil {
			return nil, apiErr("InvalidEventPatternException", "archive %s: %v", cfg.Name, err)
		}
		a.pattern = p
		switch v := cfg.Pattern.(type) {
		case string:
			a.patternJSON = v
		default:
			raw, _ := json.Marshal(v)
			a.patternJSON = string(raw)
		}
	}
	if b.cfg.Store != nil {
		// The archive's creation time is kept too: an archive the bus
		// re-creates at each start (BusConfig.Archives) keeps the events
		// of earlier runs, so it began when it was first created.
		key := b.archiveCreatedKey(cfg.Name)
		if v, ok := b.cfg.Store.Records(key)[key]; ok {
			if t, err := time.Parse(time.RFC3339Nano, string(v)); err == nil {
				a.created = t.UTC()
			}
		} else if err := b.cfg.Store.Put(key, []byte(a.created.Format(time.RFC3339Nano))); err != nil {
			return nil, fmt.Errorf("localrt: bus %s: keep archive %s: %w", b.cfg.Name, cfg.Name, err)
		}
		for k, v := range b.cfg.Store.Records(b.archivePrefix(cfg.Name)) {
			var e archivedEvent
			if err := json.Unmarshal(v, &e); err != nil {
				return nil, fmt.Errorf("localrt: bus %s: archived event %s: %w", b.cfg.Name, k, err)
			}
			a.events = append(a.events, e)
		}
		sort.SliceStable(a.events, func(i, j int) bool { return a.events[i].ArchivedAt.Before(a.events[j].ArchivedAt) })
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, dup := b.archives[cfg.Name]; dup {
		return nil, apiErr("ResourceAlreadyExistsException", "Archive %s already exists.", cfg.Name)
	}
	b.archives[cfg.Name] = a
	return a, nil
}

// archiveEvent adds an accepted (not replayed) event to every archive whose
// pattern matches it, kept in the Store first; an error: none was kept.
// The caller does not hold b.mu.
func (b *Bus) archiveEvent(raw json.RawMessage, m map[string]any, now time.Time) error {
	t := now
	if s, ok := m["time"].(string); ok {
		if pt, err := time.Parse(time.RFC3339, s); err == nil {
			t = pt
		}
	}
	b.mu.Lock()
	type add struct {
		a *archive
		e archivedEvent
	}
	var adds []add
	for _, a := range b.archives {
		if a.pattern != nil && !a.pattern.Match(m) {
			continue
		}
		var delay time.Duration
		if b.cfg.ArchiveDelay > 0 {
			delay = rand.N(b.cfg.ArchiveDelay + 1)
		}
		adds = append(adds, add{a, archivedEvent{Time: t.UTC(), ArchivedAt: now, VisibleAt: now.Add(delay), Event: raw}})
	}
	b.mu.Unlock()
	if b.cfg.Store != nil {
		var kept []string
		for _, ad := range adds {
			v, err := json.Marshal(ad.e)
			key := fmt.Sprintf("%s%020d-%08x", b.archivePrefix(ad.a.cfg.Name), now.UnixNano(), rand.Uint32())
			if err == nil {
				err = b.cfg.Store.Put(key, v)
			}
			if err != nil {
				_ = b.cfg.Store.Delete(kept...)
				return fmt.Errorf("the local bus could not keep the event in archive %s: %w", ad.a.cfg.Name, err)
			}
			kept = append(kept, key)
		}
	}
	b.mu.Lock()
	for _, ad := range adds {
		ad.a.events = append(ad.a.events, ad.e)
	}
	b.mu.Unlock()
	return nil
}

// live returns the archive's events not yet past its retention at now.
func (a *archive) live(now time.Time) []archivedEvent {
	if a.cfg.RetentionDays == 0 {
		return a.events
	}
	cut := now.Add(-time.Duration(a.cfg.RetentionDays) * 24 * time.Hour)
	var out []archivedEvent
	for _, e := range a.events {
		if e.ArchivedAt.After(cut) {
			out = append(out, e)
		}
	}
	return out
}

// CreateArchive creates an archive of this bus, as EventBridge
// CreateArchive does (API_CreateArchive): EventSourceArn must be this bus's
// ARN (else ResourceNotFoundException), ArchiveName 1..48 characters of
// [.\-_A-Za-z0-9] (ValidationException), EventPattern valid
// (InvalidEventPatternException), the name unused
// (ResourceAlreadyExistsException). KmsKeyIdentifier is accepted and
// ignored (nothing is encrypted locally). The archive takes the events
// accepted from now on, never earlier ones.
func (b *Bus) CreateArchive(ctx context.Context, in *eventbridge.CreateArchiveInput, _ ...func(*eventbridge.Options)) (*eventbridge.CreateArchiveOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil || aws.ToString(in.EventSourceArn) != b.ARN() {
		return nil, apiErr("ResourceNotFoundException", "Event bus %s does not exist.", aws.ToString(in.EventSourceArn))
	}
	if err := validateDescription("CreateArchive", aws.ToString(in.Description)); err != nil {
		return nil, err
	}
	cfg := ArchiveConfig{Name: aws.ToString(in.ArchiveName), RetentionDays: aws.ToInt32(in.RetentionDays), Description: aws.ToString(in.Description)}
	if in.EventPattern != nil {
		cfg.Pattern = aws.ToString(in.EventPattern)
	}
	a, err := b.addArchive(cfg)
	if err != nil {
		return nil, err
	}
	b.keepArchiveDef(cfg)
	return &eventbridge.CreateArchiveOutput{ArchiveArn: aws.String(b.archiveARN(cfg.Name)), CreationTime: aws.Time(a.created), State: ebtypes.ArchiveStateEnabled}, nil
}

// storedArchiveDef is an archive CreateArchive made, as the Store keeps it.
type storedArchiveDef struct {
	Name          string `json:"name"`
	Pattern       string `json:"pattern,omitempty"`
	RetentionDays int32  `json:"retention_days"`
	Description   string `json:"description,omitempty"`
}

// archiveCreatedKey is the Store key of an archive's creation time (not
// under archivePrefix, whose records are the archived events).
func (b *Bus) archiveCreatedKey(name string) string {
	return "bus/" + b.ARN() + "/archive-created/" + name
}

func (b *Bus) archiveDefPrefix() string { return "bus/" + b.ARN() + "/archive-def/" }

func (b *Bus) keepArchiveDef(cfg ArchiveConfig) {
	if b.cfg.Store == nil {
		return
	}
	p, _ := cfg.Pattern.(string)
	v, _ := json.Marshal(storedArchiveDef{Name: cfg.Name, Pattern: p, RetentionDays: cfg.RetentionDays, Description: cfg.Description})
	if err := b.cfg.Store.Put(b.archiveDefPrefix()+cfg.Name, v); err != nil {
		b.log.Warn("could not keep the archive's definition: recreate it after a restart", "archive", cfg.Name, "error", err)
	}
}

// restoreArchives registers BusConfig.Archives and the archives an earlier
// CreateArchive made, with their kept events.
func (b *Bus) restoreArchives() error {
	for _, c := range b.cfg.Archives {
		if _, err := b.addArchive(c); err != nil {
			return fmt.Errorf("localrt: bus %s: %w", b.cfg.Name, err)
		}
	}
	if b.cfg.Store == nil {
		return nil
	}
	for k, v := range b.cfg.Store.Records(b.archiveDefPrefix()) {
		var d storedArchiveDef
		if err := json.Unmarshal(v, &d); err != nil {
			return fmt.Errorf("localrt: bus %s: archive definition %s: %w", b.cfg.Name, k, err)
		}
		b.mu.Lock()
		_, exists := b.archives[d.Name]
		b.mu.Unlock()
		if exists {
			continue
		}
		cfg := ArchiveConfig{Name: d.Name, RetentionDays: d.RetentionDays, Description: d.Description}
		if d.Pattern != "" {
			cfg.Pattern = d.Pattern
		}
		if _, err := b.addArchive(cfg); err != nil {
			return fmt.Errorf("localrt: bus %s: %w", b.cfg.Name, err)
		}
	}
	return nil
}

// DescribeArchive describes an archive (API_DescribeArchive):
// ResourceNotFoundException for an unknown name. EventCount and SizeBytes
// count the events kept now (AWS reconciles them within 24 hours).
func (b *Bus) DescribeArchive(ctx context.Context, in *eventbridge.DescribeArchiveInput, _ ...func(*eventbridge.Options)) (*eventbridge.DescribeArchiveOutput, error) {
	if in == nil {
		in = &eventbridge.DescribeArchiveInput{}
	}
	name, err := requestName(ctx, "ArchiveName", in.ArchiveName, MaxArchiveNameLength)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	a, ok := b.archives[name]
	if !ok {
		return nil, apiErr("ResourceNotFoundException", "Archive %s does not exist.", name)
	}
	evs := a.live(b.cfg.Now())
	var size int64
	for _, e := range evs {
		size += int64(len(e.Event))
	}
	out := &eventbridge.DescribeArchiveOutput{
		ArchiveArn: aws.String(b.archiveARN(name)), ArchiveName: aws.String(name), CreationTime: aws.Time(a.created),
		EventCount: int64(len(evs)), SizeBytes: size, EventSourceArn: aws.String(b.ARN()),
		RetentionDays: aws.Int32(a.cfg.RetentionDays), State: ebtypes.ArchiveStateEnabled,
	}
	if a.patternJSON != "" {
		out.EventPattern = aws.String(a.patternJSON)
	}
	if a.cfg.Description != "" {
		out.Description = aws.String(a.cfg.Description)
	}
	return out, nil
}

// ListArchives lists the bus's archives by name (API_ListArchives:
// NamePrefix, EventSourceArn filters; Limit at most 100; one page, no
// NextToken).
func (b *Bus) ListArchives(ctx context.Context, in *eventbridge.ListArchivesInput, _ ...func(*eventbridge.Options)) (*eventbridge.ListArchivesOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		in = &eventbridge.ListArchivesInput{}
	}
	if err := validateList(in.Limit, in.NamePrefix, MaxArchiveNameLength, string(in.State), stateStrings(ebtypes.ArchiveState("").Values())); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	out := &eventbridge.ListArchivesOutput{Archives: []ebtypes.Archive{}}
	if src := aws.ToString(in.EventSourceArn); src != "" && src != b.ARN() {
		return out, nil
	}
	names := make([]string, 0, len(b.archives))
	for n := range b.archives {
		if strings.HasPrefix(n, aws.ToString(in.NamePrefix)) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		a := b.archives[n]
		evs := a.live(b.cfg.Now())
		out.Archives = append(out.Archives, ebtypes.Archive{ArchiveName: aws.String(n), CreationTime: aws.Time(a.created),
			EventCount: int64(len(evs)), EventSourceArn: aws.String(b.ARN()), RetentionDays: aws.Int32(a.cfg.RetentionDays), State: ebtypes.ArchiveStateEnabled})
	}
	if l := int(aws.ToInt32(in.Limit)); l > 0 && l < len(out.Archives) {
		out.Archives = out.Archives[:l]
	}
	return out, nil
}

// AddRule adds a rule to the running bus, as PutRule adds one to an
// EventBridge bus: events accepted from now on that its pattern matches
// go to its target (subscribe the target first, or they count as
// Unsubscribed); events accepted earlier reach it only through a replay
// (StartReplay). It returns an error for a rule without a name, target or
// pattern, a name in use, or an invalid pattern.
func (b *Bus) AddRule(r Rule) error {
	if r.Name == "" || r.Target == "" || r.Pattern == nil {
		return fmt.Errorf("localrt: rule %q needs a name, a target and a pattern", r.Name)
	}
	p, err := CompilePattern(r.Pattern)
	if err != nil {
		return fmt.Errorf("localrt: rule %s: %w", r.Name, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, x := range b.rules {
		if x.rule.Name == r.Name {
			return fmt.Errorf("localrt: duplicate rule name %q", r.Name)
		}
	}
	b.rules = append(b.rules, busRule{rule: r, pattern: p})
	return nil
}

// DescribeRule answers a rule's name, ARN, bus and pattern
// (API_DescribeRule): ResourceNotFoundException for an unknown rule or
// another bus.
func (b *Bus) DescribeRule(ctx context.Context, in *eventbridge.DescribeRuleInput, _ ...func(*eventbridge.Options)) (*eventbridge.DescribeRuleOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if in == nil {
		in = &eventbridge.DescribeRuleInput{}
	}
	name := aws.ToString(in.Name)
	if err := validateName("Name", name, maxRuleNameLength); err != nil {
		return nil, err
	}
	if bus := aws.ToString(in.EventBusName); bus != "" && !b.isThisBus(bus) || bus == "" && b.cfg.Name != DefaultBusName {
		return nil, apiErr("ResourceNotFoundException", "Rule %s does not exist on EventBus %s.", name, bus)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range b.rules {
		if r.rule.Name == name {
			pat, _ := r.rule.Pattern.(string)
			if pat == "" {
				raw, _ := json.Marshal(r.rule.Pattern)
				pat = string(raw)
			}
			return &eventbridge.DescribeRuleOutput{Arn: aws.String(b.RuleARN(name)), Name: aws.String(name),
				EventBusName: aws.String(b.cfg.Name), EventPattern: aws.String(pat), State: ebtypes.RuleStateEnabled}, nil
		}
	}
	return nil, apiErr("ResourceNotFoundException", "Rule %s does not exist on EventBus %s.", name, b.cfg.Name)
}
