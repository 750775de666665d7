package daemon

import (
	"context"
	"os"

	"github.com/substrat/substrat/fsstore"
	"github.com/substrat/substrat/supervisor/api"
	"github.com/substrat/substrat/supervisor/daemon/doctor"
	"github.com/substrat/substrat/supervisor/rpc"
)

// registerDaemon registers the methods of the daemon itself: status, doctor, stop, recovery, watch.
func (d *Daemon) registerDaemon() {
	c, s := d.core, d.srv
	rpc.Handle(s, api.DaemonStatus, func(ctx context.Context, _ struct{}) (api.StatusResult, error) {
		st := c.Status()
		st.Pid, st.Home, st.Version, st.StartedAt, st.MaxSlots = os.Getpid(), d.store.Layout().Home, d.opts.Version, d.started.UTC(), d.maxSlots
		ns := d.host.notify.status()
		st.Notify = &ns
		ls := d.host.limits.Status()
		st.Limits = &api.LimitsStatus{Mechanism: ls.Mechanism, Detail: ls.Detail, Groups: ls.Groups, Defaults: c.Settings().Limits}
		st.KeptOut = d.keptOut()
		return st, nil
	})
	rpc.Handle(s, api.DaemonDoctor, func(ctx context.Context, _ struct{}) (api.DoctorReport, error) {
		ls := d.host.limits.Status()
		in := doctor.Input{Home: d.store.Layout().Home, Where: "daemon",
			Limits: &api.LimitsStatus{Mechanism: ls.Mechanism, Detail: ls.Detail, Groups: ls.Groups}}
		for _, a := range c.List() {
			if a.AgentState != fsstore.AgentTerminated {
				in.Count(a.Provider, a.Workspace)
				in.CountExecutor(a.Executor)
			}
		}
		return api.DoctorReport{Pid: os.Getpid(), Checks: doctor.Run(ctx, in)}, nil
	})
	rpc.Handle(s, api.DaemonStop, func(ctx context.Context, _ struct{}) (api.StopResult, error) {
		d.requestStop()
		return api.StopResult{Stopping: true}, nil
	})
	rpc.Handle(s, api.DaemonRecovery, func(ctx context.Context, _ struct{}) (*api.Report, error) {
		return d.report, nil
	})
	rpc.HandleStream(s, api.DaemonWatch, func(ctx context.Context, p api.RefParams, send func(api.WatchFrame) error) (struct{}, error) {
		id := ""
		if p.Ref != "" {
			var err error
			if id, err = c.Resolve(p.Ref); err != nil {
				return struct{}{}, err
			}
		}
		return stream(ctx, c.Subscribe(id), send)
	})
	rpc.Handle(s, api.ConfigShow, func(ctx context.Context, _ struct{}) (api.ConfigReport, error) {
		return d.settings.effective().ConfigReport, nil
	})
}

// keptOut returns the directories the start-up recovery kept out of the
// live tree, less those adopted since (fixed and moved back by hand).
func (d *Daemon) keptOut() []fsstore.Finding {
	out := []fsstore.Finding{}
	if d.report == nil {
		return out
	}
	for _, f := range d.report.KeptOut {
		if f.Agent != "" {
			if _, err := d.core.Resolve(f.Agent); err == nil {
				continue
			}
		}
		out = append(out, f)
	}
	return out
}
