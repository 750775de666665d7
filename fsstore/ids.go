package fsstore

import (
	"github.com/google/uuid"
)

// NewID returns a new UUIDv7 in canonical lower-case form.
func NewID() string {
	return uuid.Must(uuid.NewV7()).String()
}

// IsID reports whether s is a UUIDv7 in canonical lower-case form, the only
// spelling accepted as an agent directory or message name. uuid.Parse also
// accepts braces, a urn: prefix and upper case, which would alias.
func IsID(s string) bool {
	if len(s) != 36 {
		return false
	}
	u, err := uuid.Parse(s)
	return err == nil && u.Version() == 7 && u.String() == s
}
