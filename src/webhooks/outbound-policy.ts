/**
 * Where a webhook may be sent. Only http and https; never a loopback, link-local, private or
 * otherwise special address unless the operator allows private targets; never this daemon's own
 * port on this machine. Checked on the address each attempt actually connects to: the name is
 * resolved, every answer checked, and the connection pinned to a checked one (no DNS rebinding
 * between the check and the connect).
 */
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';
import { networkInterfaces } from 'node:os';

export interface OutboundPolicy {
  /** Loopback, link-local and private ranges allowed (tests, or a receiver on the same network). */
  allowPrivate: boolean;
  /** The daemon's own port: never a target on this machine, whatever else is allowed. */
  ownPort: number | null;
  /** What the refusals name: `webhook URL` and its setting unless told (the MCP proxy's upstreams). */
  subject?: { noun: string; allowSetting: string };
}

const WEBHOOK = { noun: 'webhook URL', allowSetting: 'RUNGUARD_WEBHOOK_ALLOW_PRIVATE' };

export class OutboundRefused extends Error {
  override name = 'OutboundRefused';
}

/** Addresses no webhook reaches unless private targets are allowed. */
const SPECIAL = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.88.99.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const)
  SPECIAL.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96],
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const)
  SPECIAL.addSubnet(net, prefix, 'ipv6');

/** An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is checked as the IPv4 address it is. */
function normalize(address: string): { address: string; family: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return { address: mapped[1]!, family: 'ipv4' };
  return { address, family: isIP(address) === 6 ? 'ipv6' : 'ipv4' };
}

export function isSpecialAddress(address: string): boolean {
  const normalized = normalize(address);
  return SPECIAL.check(normalized.address, normalized.family);
}

/** This machine's addresses (and the unspecified ones, which reach it too). */
function localAddresses(): Set<string> {
  const out = new Set(['0.0.0.0', '::', '127.0.0.1', '::1']);
  for (const list of Object.values(networkInterfaces()))
    for (const addressInfo of list ?? []) out.add(normalize(addressInfo.address).address);
  return out;
}

function urlPort(url: URL): number {
  return url.port ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
}

/** The URL's form: http or https, a host, no credentials. Throws OutboundRefused with the reason. */
export function checkUrlForm(raw: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new OutboundRefused('The webhook URL is not a valid URL.');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new OutboundRefused('The webhook URL must be http or https.');
  if (url.username || url.password) throw new OutboundRefused('The webhook URL may not carry credentials.');
  return url;
}

/** Refuses an address the policy forbids for this URL. */
export function checkAddress(url: URL, address: string, policy: OutboundPolicy): void {
  const subject = policy.subject ?? WEBHOOK;
  const normal = normalize(address).address;
  if (
    policy.ownPort !== null &&
    urlPort(url) === policy.ownPort &&
    (isSpecialAddress(normal) || localAddresses().has(normal))
  ) {
    throw new OutboundRefused(`The ${subject.noun} points at this daemon's own port (${address}).`);
  }
  if (!policy.allowPrivate && isSpecialAddress(normal)) {
    throw new OutboundRefused(
      `The ${subject.noun} resolves to ${address}, a loopback, link-local, private or reserved address ` +
        `(allowed only with ${subject.allowSetting}).`,
    );
  }
}

/**
 * Resolves the URL's host and checks every address it has (one forbidden answer refuses it: a
 * name that also points inward is not trusted). Answers the address to connect to.
 */
export async function resolveAllowed(url: URL, policy: OutboundPolicy): Promise<{ address: string; family: number }> {
  const host = url.hostname.replace(/^\[|\]$/g, '');
  const answers = isIP(host)
    ? [{ address: host, family: isIP(host) }]
    : await lookup(host, { all: true, verbatim: true });
  if (answers.length === 0) throw new OutboundRefused(`The host ${host} has no address.`);
  for (const answer of answers) checkAddress(url, answer.address, policy);
  return answers[0]!;
}
