// The one table of job kinds: which chart runs each, its compose steps, whether it takes services,
// and whether POST /api/deployment/jobs starts it. Job kinds are not audit kinds (ACTION_KINDS in
// src/db/schema.ts). A self-update has a job of its own only for its transcript (event stream): it
// is written with the update's request, never queued or claimed, and run by the self-update
// reconcilers (docs/adr/0030-self-update-transcript.md).

export interface JobKindDef {
  /** The chart that runs it: compose steps, the host migration, or a cancel of another job. */
  chart: 'job' | 'host-migration' | 'cancel' | 'self-update';
  /** The job chart's steps, in order (`prune` removes dangling images after a pull). */
  steps: readonly string[];
  /** Whether it downloads the templates and renders .env first. */
  needsPrepare: boolean;
  /** Whether it acts on chosen services (else on the whole platform). */
  takesServices: boolean;
  /** Started by POST /api/deployment/jobs (the others have endpoints of their own). */
  requestable: boolean;
  /** Run one at a time in the queue (a cancel is handled apart, at once). */
  queued: boolean;
}

export const JOB_KINDS = {
  deploy: { chart: 'job', steps: ['pull', 'up', 'prune'], needsPrepare: true, takesServices: false, requestable: true, queued: true },
  restart: { chart: 'job', steps: ['restart'], needsPrepare: false, takesServices: true, requestable: true, queued: true },
  stop: { chart: 'job', steps: ['stop'], needsPrepare: false, takesServices: true, requestable: true, queued: true },
  kill: { chart: 'job', steps: ['kill'], needsPrepare: false, takesServices: true, requestable: true, queued: true },
  pull: { chart: 'job', steps: ['pull', 'prune'], needsPrepare: false, takesServices: true, requestable: true, queued: true },
  'compose-up': { chart: 'job', steps: ['up-pulled'], needsPrepare: false, takesServices: true, requestable: true, queued: true },
  'apply-config': { chart: 'job', steps: ['recreate'], needsPrepare: true, takesServices: true, requestable: true, queued: true },
  'migrate-host': { chart: 'host-migration', steps: [], needsPrepare: false, takesServices: false, requestable: false, queued: true },
  'cancel-job': { chart: 'cancel', steps: [], needsPrepare: false, takesServices: false, requestable: false, queued: false },
  'self-update': { chart: 'self-update', steps: [], needsPrepare: false, takesServices: false, requestable: false, queued: false },
} as const satisfies Record<string, JobKindDef>;

export type JobKind = keyof typeof JOB_KINDS;

const kinds = Object.keys(JOB_KINDS) as JobKind[];
/** Every job kind. */
export const JOB_KIND_NAMES = kinds as [JobKind, ...JobKind[]];
/** The kinds POST /api/deployment/jobs starts, in the table's order. */
export const REQUESTABLE_KINDS = kinds.filter((k) => JOB_KINDS[k].requestable) as [RequestableKind, ...RequestableKind[]];
export type RequestableKind = { [K in JobKind]: (typeof JOB_KINDS)[K]['requestable'] extends true ? K : never }[JobKind];
/** The kinds run one at a time in the queue. */
export const QUEUED_KINDS = kinds.filter((k) => JOB_KINDS[k].queued);
