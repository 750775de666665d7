package openai

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/substrat/substrat/provider"
)

var (
	errEOF          = errors.New("end of stream")
	errEventTooLong = errors.New("event too long")
)

// eventScanner reads the data of server-sent events. Fields other than
// data are skipped; a line that is no SSE field at all is a protocol
// error (a server that sends HTML or plain text is not an SSE server).
type eventScanner struct {
	br  *bufio.Reader
	max int
}

func newEventScanner(r io.Reader, max int) *eventScanner {
	return &eventScanner{br: bufio.NewReaderSize(r, 64<<10), max: max}
}

// next returns the data of the next event that has some. At the end of
// the stream it returns errEOF (or the read error); an event not ended by
// a blank line is dropped, as the SSE spec says.
func (s *eventScanner) next() ([]byte, error) {
	var data []byte
	has := false
	for {
		line, err := s.line()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errEOF // an event cut short is dropped
			}
			return nil, err
		}
		if len(line) == 0 { // end of an event
			if has {
				return data, nil
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if has {
				data = append(data, '\n')
			}
			data = append(data, value...)
			has = true
			if len(data) > s.max {
				return nil, fmt.Errorf("%w: an event is over %d bytes", errEventTooLong, s.max)
			}
		case "event", "id", "retry":
		default:
			return nil, fmt.Errorf("%w: the stream has a line that is not a server-sent event field: %q", provider.ErrProtocol, quote(line))
		}
	}
}

// line reads one line without its end of line; a line over max fails.
func (s *eventScanner) line() ([]byte, error) {
	var line []byte
	for {
		frag, err := s.br.ReadSlice('\n')
		line = append(line, frag...)
		if len(line) > s.max+2 {
			return nil, fmt.Errorf("%w: a line is over %d bytes", errEventTooLong, s.max)
		}
		switch {
		case err == nil:
			return bytes.TrimRight(line, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimRight(line, "\r\n"), nil
		default:
			return nil, err
		}
	}
}
