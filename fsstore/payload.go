package fsstore

// A Payload is the data of one type of event: it knows the type's name.
// Agent.Commit takes a Payload, so that an event's type and its data
// cannot be paired wrongly.
type Payload interface {
	EventType() string
}

// A Change is a Payload that changes the session: applying its event
// calls applyTo on a copy of the session. Other payloads are history for
// people and tools to read. Only this package's types are Changes.
type Change interface {
	Payload
	applyTo(s *Session) error
}

// changes decodes the data of each event type that changes the session,
// by type name. It is filled once, by init, from the Change types.
var changes = map[string]func(Event) (Change, error){}

func init() {
	register[StateChange]()
	register[ProviderChange]()
	register[Counters]()
	register[MetadataChange]()
	register[PoolChange]()
	register[Budget]()
	register[GateChange]()
	register[Waiting]()
	register[Reminder]()
	register[ReminderDone]()
	register[Subscription]()
	register[Unsubscribed]()
	register[Edit]()
	register[Permissions]()
	register[Limits]()
	register[WorkDirChange]()
	register[Approval]()
	register[ApprovalAnswer]()
	register[Parked]()
	register[ExecutorChange]()
}

// register makes T's events decodable by its type name.
func register[T Change]() {
	var zero T
	typ := zero.EventType()
	if _, dup := changes[typ]; dup {
		panic("fsstore: two Change types for event type " + typ)
	}
	changes[typ] = func(e Event) (Change, error) {
		var d T
		err := e.Decode(&d)
		return d, err
	}
}

// changesSession reports whether events of type typ change the snapshot
// beyond last_seq and updated_at. The others ("message_sent", "spawned",
// any type the daemon adds) are history only.
func changesSession(typ string) bool {
	_, ok := changes[typ]
	return ok || typ == EvCreated
}

// exact is a Change whose value, before it is marshalled, is what its
// JSON decodes to (its strings are valid UTF-8, say): Commit applies it as
// it is instead of decoding the data it just encoded.
type exact interface {
	Change
	roundTrips() bool
}

// changeOf returns the Change that e makes: p, the payload e was made
// from, if it comes back from JSON unchanged, or else e's data decoded.
// It returns nil for a history event.
func changeOf(e Event, p Payload) (Change, error) {
	decode, ok := changes[e.Type]
	if !ok {
		return nil, nil
	}
	if x, ok := p.(exact); ok && x.EventType() == e.Type && x.roundTrips() {
		return x, nil
	}
	return decode(e)
}
