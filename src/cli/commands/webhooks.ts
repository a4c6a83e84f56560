/** `runguard webhooks list|create|update|delete|test|deliveries|replay`: alert endpoints and their deliveries. */
import { Argument, Command, InvalidArgumentError, Option } from 'commander';
import type { WebhookDelivery, WebhookEndpoint, WebhookPing, WebhookReplay } from '../../contract/index.js';
import type { Page } from '../api-client.js';
import { CliError } from '../errors.js';
import { apiCommand, withApi, type ApiOptions } from '../command.js';
import { timestamp } from '../output.js';

type Endpoint = WebhookEndpoint & { secret?: string };

const path = (id: string) => `/v1/webhooks/${encodeURIComponent(id)}`;
const list = (value: string) =>
  value
    .split(',')
    .map((item) => item.trim())
    .filter(Boolean);
const onOff = (value: string) => {
  if (value === 'on' || value === 'true') return true;
  if (value === 'off' || value === 'false') return false;
  throw new InvalidArgumentError("expected 'on' or 'off'");
};

interface EndpointOptions extends ApiOptions {
  endpointUrl?: string;
  events?: string[];
  format?: string;
  description?: string;
  enabled?: boolean;
}

const endpointOptions = (command: Command) =>
  command
    .addOption(
      new Option('--events <list>', 'comma-separated event types (default: all but run.failed)').argParser(list),
    )
    .addOption(
      new Option('--format <format>', 'standard (signed JSON) or slack (a text message)').choices([
        'standard',
        'slack',
      ]),
    )
    .addOption(new Option('--description <text>', 'a note for people'));

export function webhooksCommand(): Command {
  const webhooks = new Command('webhooks').description('alerts: webhook endpoints, test pings, deliveries and replays');
  webhooks.addCommand(
    apiCommand('list', "the workspace's webhook endpoints").action(
      withApi(async ({ client, out }) => {
        const items = await client.request<Endpoint[]>('GET', '/v1/webhooks');
        if (out.json) return out.data(items);
        out.table(
          ['ID', 'URL', 'FORMAT', 'ENABLED', 'EVENTS'],
          items.map((endpoint) => [
            endpoint.id,
            endpoint.url,
            endpoint.format,
            endpoint.enabled ? 'yes' : `no${endpoint.disabled_reason ? ` (${endpoint.disabled_reason})` : ''}`,
            endpoint.events.join(','),
          ]),
        );
      }),
    ),
  );
  webhooks.addCommand(
    endpointOptions(apiCommand('create', 'add an endpoint; prints its signing secret, shown only this once'))
      .addArgument(new Argument('<url>', 'http or https URL of the receiver'))
      .action(
        withApi(async ({ client, out }, options: EndpointOptions, url: string) => {
          const created = await client.request<Endpoint>('POST', '/v1/webhooks', {
            url,
            events: options.events,
            format: options.format,
            description: options.description,
          });
          if (out.json) return out.data(created);
          out.line(`Created webhook ${created.id} -> ${created.url} (${created.events.join(', ')}).`);
          out.line(`Signing secret (shown only now): ${created.secret}`);
        }),
      ),
  );
  webhooks.addCommand(
    endpointOptions(apiCommand('update', 'change an endpoint, or enable or disable it'))
      .addArgument(new Argument('<id>'))
      // Not --url: that names the daemon, as on every command.
      .addOption(new Option('--endpoint-url <url>', 'a new receiver URL'))
      .addOption(new Option('--enabled <on|off>', 'enable or disable').argParser(onOff))
      .action(
        withApi(async ({ client, out }, options: EndpointOptions, id: string) => {
          const updated = await client.request<Endpoint>('PATCH', path(id), {
            url: options.endpointUrl,
            events: options.events,
            format: options.format,
            description: options.description,
            enabled: options.enabled,
          });
          if (out.json) return out.data(updated);
          out.line(
            `Webhook ${updated.id} -> ${updated.url}: ${updated.enabled ? 'enabled' : 'disabled'}, ${updated.events.join(', ')}.`,
          );
        }),
      ),
  );
  webhooks.addCommand(
    apiCommand('delete', 'remove an endpoint and its deliveries')
      .addArgument(new Argument('<id>'))
      .addOption(new Option('--yes', 'confirm: the endpoint and its deliveries are deleted for good'))
      .action(
        withApi(async ({ client, out }, options: ApiOptions & { yes?: boolean }, id: string) => {
          // As every delete of the CLI: said, not done, without --yes.
          if (!options.yes)
            throw new CliError(`deleting webhook ${id} deletes its deliveries for good; run again with --yes`);
          await client.request('DELETE', path(id));
          if (out.json) return out.data({ deleted: id });
          out.line(`Deleted webhook ${id}.`);
        }),
      ),
  );
  webhooks.addCommand(
    apiCommand('test', 'send a signed webhook.test event now and show what the receiver answered')
      .addArgument(new Argument('<id>'))
      .action(
        withApi(async ({ client, out }, _o, id: string) => {
          const ping = await client.request<WebhookPing>('POST', `${path(id)}/test`);
          if (out.json) return out.data(ping);
          out.line(
            ping.ok
              ? `Delivered: HTTP ${ping.status_code} in ${ping.latency_ms} ms.`
              : `Not delivered: ${ping.error ?? `HTTP ${ping.status_code}`}.`,
          );
          if (!ping.ok) process.exitCode = 1;
        }),
      ),
  );
  webhooks.addCommand(
    apiCommand('deliveries', "an endpoint's deliveries, newest first")
      .addArgument(new Argument('<id>'))
      .addOption(new Option('--status <status>', 'only these').choices(['pending', 'delivered', 'failed']))
      .addOption(new Option('--page <n>', 'page').default('1'))
      .addOption(new Option('--per-page <n>', 'per page, at most 100').default('50'))
      .action(
        withApi(
          async (
            { client, out },
            options: ApiOptions & { status?: string; page: string; perPage: string },
            id: string,
          ) => {
            const query = new URLSearchParams({ page: options.page, per_page: options.perPage });
            if (options.status) query.set('status', options.status);
            const page = await client.request<Page<WebhookDelivery>>('GET', `${path(id)}/deliveries?${query}`);
            if (out.json) return out.data(page);
            out.table(
              ['DELIVERY', 'EVENT', 'TYPE', 'STATUS', 'ATTEMPTS', 'LAST', 'CREATED'],
              page.items.map((delivery) => [
                delivery.id,
                delivery.event_id,
                delivery.event_type,
                delivery.status === 'pending' && delivery.next_attempt_at
                  ? `pending (next ${timestamp(delivery.next_attempt_at)})`
                  : delivery.status,
                delivery.attempts,
                delivery.last_error ?? (delivery.last_status_code === null ? '' : `HTTP ${delivery.last_status_code}`),
                timestamp(delivery.created_at),
              ]),
            );
            out.line(`${page.items.length} of ${page.total} deliveries (page ${page.page}).`);
          },
        ),
      ),
  );
  webhooks.addCommand(
    apiCommand('replay', "send a delivery's event again")
      .addArgument(new Argument('<id>', 'the endpoint'))
      .addArgument(new Argument('<delivery_id>'))
      .action(
        withApi(async ({ client, out }, _o, id: string, deliveryId: string) => {
          const replay = await client.request<WebhookReplay>(
            'POST',
            `${path(id)}/deliveries/${encodeURIComponent(deliveryId)}/replay`,
          );
          if (out.json) return out.data(replay);
          out.line(`Queued as delivery ${replay.delivery_id}.`);
        }),
      ),
  );
  return webhooks;
}
