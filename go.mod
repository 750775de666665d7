module github.com/substrat/substrat

go 1.26.0

require (
	github.com/google/renameio/v2 v2.0.2
	github.com/google/uuid v1.6.0
	golang.org/x/sync v0.24.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/modelcontextprotocol/go-sdk v1.8.0 // indirect
	github.com/rogpeppe/go-internal v1.16.0 // indirect
	golang.org/x/tools v0.42.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
