"""The pure core of PallasTriggers: schedules, templates, signatures and run policies.

Shared by `pallas run` (the runtime) and the operator, neither of which imports the other:

- `schedule`: cron (croniter) and `@every <duration>` schedules, and the CronJob rules for
  missed runs (`plan_runs`);
- `template`: the `{{ .a.b }}` message templates (parse at validation, render at run time);
- `signature`: webhook signatures (GitHub, Slack, plain HMAC-SHA256, bearer), checked on the raw
  body before anything parses it;
- `policy`: concurrency policies, the per-minute bound and the pruning of run history;
- `restart`: closing the runs a stopped process left `Running` (never run twice);
- `when`: an event trigger's CEL condition (cel-python), compiled at validation;
- `event`: whether a watch event fires an event trigger, and its template's values.

No I/O: times come in as arguments, so every rule is unit-tested without sleeping.
"""
