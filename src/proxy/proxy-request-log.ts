/** What a proxied request leaves in the log: never its token, query string or headers. */

/** Request URLs in logs lose their query string and any proxy token. */
export function redactProxyUrl(url: string): string {
  // Not anchored: an absolute-form target (`http://host/proxy/t/...`) carries the token too.
  return (url.split('?')[0] ?? '').replace(/\/proxy\/t\/[^/]+/, '/proxy/t/[redacted]');
}

/**
 * Fastify's request log line for proxy routes: no token, no query string, never a header.
 * Typed as Fastify declares serializers (returning a string), though pino takes any value.
 */
export const proxyRequestSerializer = ((req: { method: string; url: string; ip?: string }) => ({
  method: req.method,
  url: redactProxyUrl(req.url),
  remoteAddress: req.ip,
})) as unknown as (value: unknown) => string;
