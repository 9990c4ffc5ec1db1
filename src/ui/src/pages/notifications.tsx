// Notifications (admin): webhook endpoints, added, tested, disabled or enabled, and removed, and
// the recent deliveries with their status. An endpoint's signing secret is shown once, right after
// it is added; the receiver checks x-installer-signature with it (docs/notifications.md). A webhook
// reaches public addresses only, unless the admin allows it private networks (loopback, link-local,
// private ranges, the installer's own networks): shown on each row, set when adding or later.
import { useState } from 'preact/hooks';
import { api } from '../api.ts';
import { time } from '../format.ts';
import { Badge, Dialog, ErrorBox, Notice, TableScroll, usePoll } from '../components/common.tsx';
import type { WebhookJson as WebhookRow, DeliveryJson as DeliveryRow } from '../../../contracts/notifications.ts';

const HTTP_URL = /^https?:\/\/[^\s/]+/i;

export function NotificationsPage() {
  const hooks = usePoll((signal) => api<WebhookRow[]>('/api/notifications/webhooks', { signal }), 0);
  const deliveries = usePoll((signal) => api<DeliveryRow[]>('/api/notifications/deliveries?limit=50', { signal }), 5_000);
  const [notice, setNotice] = useState<string | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState<string | null>(null);
  const [url, setUrl] = useState('');
  const [allowPrivate, setAllowPrivate] = useState(false);
  const [adding, setAdding] = useState(false);
  const [addError, setAddError] = useState<unknown>(null);
  const [secret, setSecret] = useState<{ url: string; secret: string } | null>(null);
  const [removing, setRemoving] = useState<WebhookRow | null>(null);
  const [dialogError, setDialogError] = useState<unknown>(null);

  const act = async (key: string, what: () => Promise<string>) => {
    setBusy(key);
    setError(null);
    setNotice(null);
    try {
      setNotice(await what());
      hooks.reload();
      deliveries.reload();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(null);
    }
  };

  const add = async (e: Event) => {
    e.preventDefault();
    setAdding(true);
    setAddError(null);
    setNotice(null);
    try {
      const created = await api<WebhookRow & { secret: string }>('/api/notifications/webhooks', { method: 'POST', json: { url, allowPrivateNetwork: allowPrivate } });
      setSecret({ url: created.url, secret: created.secret });
      setUrl('');
      setAllowPrivate(false);
      hooks.reload();
    } catch (err) {
      setAddError(err);
    } finally {
      setAdding(false);
    }
  };

  const remove = async () => {
    if (!removing) return;
    setDialogError(null);
    setBusy('dialog');
    try {
      await api(`/api/notifications/webhooks/${removing.id}`, { method: 'DELETE' });
      setNotice(`Removed the webhook to ${removing.url}.`);
      setRemoving(null);
      hooks.reload();
      deliveries.reload();
    } catch (err) {
      setDialogError(err);
    } finally {
      setBusy(null);
    }
  };

  const urlProblem = url !== '' && !HTTP_URL.test(url);

  return (
    <div class="page">
      <div class="page-head">
        <h1>Notifications</h1>
      </div>
      <p class="lead">
        Webhooks receive a signed JSON POST when a job fails, when a self-update completes, rolls back or fails (and on a rollback onto a changed
        schema), and once for each newer build on the channel. A delivery that fails is retried with backoff for up to a day, under the same
        delivery key.
      </p>
      <ErrorBox error={hooks.error} />
      <ErrorBox error={error} />
      {notice && (
        <Notice tone="ok" testid="notifications-notice">
          {notice}
        </Notice>
      )}
      {secret && (
        <Notice tone="warn" testid="webhook-secret">
          <p>
            Signing secret of the webhook to {secret.url}. Copy it now: it is not shown again. The receiver checks that{' '}
            <code>x-installer-signature</code> is <code>{'t=<timestamp>,v1=<hmac>'}</code>, where hmac is the HMAC-SHA256 with this key of the
            timestamp, a dot and the raw body, and refuses a timestamp more than 5 minutes old.
          </p>
          <p>
            <code class="secret" data-testid="secret-value">
              {secret.secret}
            </code>
          </p>
          <button type="button" class="btn" onClick={() => setSecret(null)}>
            I have stored it
          </button>
        </Notice>
      )}
      <section class="card" aria-labelledby="webhooks-title">
        <h2 id="webhooks-title">Webhooks</h2>
        {!hooks.data ? (
          <p class="muted">Loading…</p>
        ) : hooks.data.length === 0 ? (
          <p class="muted">No webhook yet.</p>
        ) : (
          <TableScroll label="Webhooks">
            <table class="table" data-testid="webhooks">
              <thead>
                <tr>
                  <th>URL</th>
                  <th>Status</th>
                  <th>Reaches</th>
                  <th>Added</th>
                  <th>Actions</th>
                </tr>
              </thead>
              <tbody>
                {hooks.data.map((h) => (
                  <tr key={h.id} data-webhook={h.url}>
                    <td class="mono break">{h.url}</td>
                    <td>
                      <Badge value={h.enabled ? 'enabled' : 'disabled'} />
                    </td>
                    <td class="small" data-testid="webhook-network">
                      {h.allowPrivateNetwork ? <strong>private networks allowed</strong> : 'public addresses only'}
                    </td>
                    <td>
                      {time(h.createdAt)} <span class="muted small">by {h.createdBy}</span>
                    </td>
                    <td class="row-actions">
                      <button
                        type="button"
                        class="btn"
                        disabled={busy !== null}
                        onClick={() =>
                          void act(`${h.id}:test`, async () => {
                            await api(`/api/notifications/webhooks/${h.id}/test`, { method: 'POST' });
                            return `A test event is queued for ${h.url}${h.enabled ? '' : ' (it waits until the webhook is enabled)'}.`;
                          })
                        }
                      >
                        Send test
                      </button>{' '}
                      <button
                        type="button"
                        class="btn"
                        disabled={busy !== null}
                        onClick={() =>
                          void act(`${h.id}:patch`, async () => {
                            await api(`/api/notifications/webhooks/${h.id}`, { method: 'PATCH', json: { enabled: !h.enabled } });
                            return h.enabled ? `The webhook to ${h.url} is disabled: it is sent nothing until enabled.` : `The webhook to ${h.url} is enabled.`;
                          })
                        }
                      >
                        {h.enabled ? 'Disable' : 'Enable'}
                      </button>{' '}
                      <button
                        type="button"
                        class="btn"
                        disabled={busy !== null}
                        onClick={() =>
                          void act(`${h.id}:network`, async () => {
                            await api(`/api/notifications/webhooks/${h.id}`, { method: 'PATCH', json: { allowPrivateNetwork: !h.allowPrivateNetwork } });
                            return h.allowPrivateNetwork
                              ? `The webhook to ${h.url} reaches public addresses only.`
                              : `The webhook to ${h.url} may reach private networks; deliveries refused meanwhile go out now.`;
                          })
                        }
                      >
                        {h.allowPrivateNetwork ? 'Public only' : 'Allow private networks'}
                      </button>{' '}
                      <button type="button" class="btn danger" disabled={busy !== null} onClick={() => (setDialogError(null), setRemoving(h))}>
                        Remove…
                      </button>
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        )}
      </section>

      <section class="card" aria-labelledby="add-webhook-title">
        <h2 id="add-webhook-title">Add a webhook</h2>
        <form class="toolbar" onSubmit={(e) => void add(e)} data-testid="add-webhook">
          <label class="url-field">
            URL
            <input name="url" type="url" value={url} autocomplete="off" spellcheck={false} placeholder="https://hooks.example.com/installer" onInput={(e) => setUrl(e.currentTarget.value)} aria-invalid={urlProblem} required />
          </label>
          <label class="check">
            <input type="checkbox" name="allowPrivateNetwork" checked={allowPrivate} onChange={(e) => setAllowPrivate(e.currentTarget.checked)} />
            Allow private networks
          </label>
          <button type="submit" class="btn primary" disabled={adding || !url}>
            {adding ? 'Adding…' : 'Add webhook'}
          </button>
        </form>
        {urlProblem && <p class="small warn-text">An http:// or https:// URL.</p>}
        <p class="small muted">
          A webhook may not reach loopback, link-local, private or reserved addresses or the installer's own networks (the Docker networks it
          is on, where the engine and the database listen), judged on every connection after the name is resolved, unless you allow private
          networks for it.
        </p>
        <ErrorBox error={addError} />
      </section>

      <section class="card" aria-labelledby="deliveries-title">
        <h2 id="deliveries-title">Recent deliveries</h2>
        <ErrorBox error={deliveries.error} />
        {!deliveries.data ? (
          <p class="muted">Loading…</p>
        ) : deliveries.data.length === 0 ? (
          <p class="muted">Nothing sent yet.</p>
        ) : (
          <TableScroll label="Recent deliveries">
            <table class="table" data-testid="deliveries">
              <thead>
                <tr>
                  <th>Event</th>
                  <th>To</th>
                  <th>Status</th>
                  <th>Attempts</th>
                  <th>Last answer</th>
                  <th>Queued</th>
                </tr>
              </thead>
              <tbody>
                {deliveries.data.map((d) => (
                  <tr key={d.id} data-delivery={d.idempotencyKey}>
                    <td>
                      {d.eventType}
                      <div class="muted small mono" title="x-installer-delivery">
                        {d.idempotencyKey}
                      </div>
                    </td>
                    <td class="mono break small">{d.endpointUrl}</td>
                    <td>
                      <Badge value={d.status} />
                      {d.status === 'pending' && d.nextAttemptAt && <div class="muted small">next {time(d.nextAttemptAt)}</div>}
                    </td>
                    <td>{d.attempts}</td>
                    <td class="small">{d.lastError ?? (d.lastStatus !== null ? String(d.lastStatus) : '—')}</td>
                    <td>{time(d.createdAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </TableScroll>
        )}
      </section>

      {removing && (
        <Dialog
          title={`Remove the webhook to ${removing.url}?`}
          confirmLabel="Remove"
          danger
          busy={busy === 'dialog'}
          error={dialogError}
          onConfirm={() => void remove()}
          onCancel={() => setRemoving(null)}
          testid="remove-webhook"
        >
          <p>It is sent nothing more, and the deliveries it is still owed are dropped.</p>
        </Dialog>
      )}
    </div>
  );
}
