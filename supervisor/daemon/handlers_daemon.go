package daemon

import (
	"context"
	"os"

	"github.com/substrat/substrat/supervisor/api"
)

// registerDaemon registers the methods of the daemon itself: status, stop, recovery, watch.
func (d *Daemon) registerDaemon() {
	c := d.core
	handle(d, api.MethodDaemonStatus, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		st := c.Status()
		st.Pid, st.Home, st.Version, st.StartedAt, st.MaxSlots = os.Getpid(), d.store.Layout().Home, d.opts.Version, d.started.UTC(), d.opts.MaxSlots
		ns := d.host.notify.status()
		st.Notify = &ns
		ls := d.host.limits.Status()
		st.Limits = &api.LimitsStatus{Mechanism: ls.Mechanism, Detail: ls.Detail, Groups: ls.Groups, Defaults: c.Settings().Limits}
		return st, nil
	})
	handle(d, api.MethodDaemonStop, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		d.requestStop()
		return map[string]bool{"stopping": true}, nil
	})
	handle(d, api.MethodDaemonRecovery, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return d.report, nil
	})
	handle(d, api.MethodDaemonWatch, func(ctx context.Context, p refParams, send func(any) error) (any, error) {
		id := ""
		if p.Ref != "" {
			var err error
			if id, err = c.Resolve(p.Ref); err != nil {
				return nil, err
			}
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	handle(d, api.MethodConfigShow, func(ctx context.Context, _ struct{}, _ func(any) error) (any, error) {
		return d.settings.effective(), nil
	})
}
