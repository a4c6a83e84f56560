/**
 * Serves the web dashboard: the files `npm run build` writes to `dist/dashboard/`, read once at
 * start into memory (a handful of small files; nothing on disk is looked up by a request's path,
 * so no path can reach outside them). The page paths all answer `index.html`, and the browser's
 * router picks the page. The API stays under `/v1`; the dashboard calls it like any client.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { extname, join } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The dashboard's pages (its router's paths, web/src/main.tsx): each answers the same index.html,
 * so a page loads from its own URL (a reload, a link). A test loads every path of the router.
 */
export const DASHBOARD_PAGES = [
  '/',
  '/sign-in',
  '/runs',
  '/runs/:run_id',
  '/users',
  '/budgets',
  '/tools',
  '/settings',
  '/pricing',
  '/alerts',
  '/api-keys',
] as const;

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.json': 'application/json; charset=utf-8',
};

/**
 * No inline script or style, no other origin: every string a page shows is workspace data, and
 * this is the second line behind rendering it as text. `style-src 'self'` still lets scripts set
 * element styles through the DOM (the chart sizes itself so), which CSP does not govern.
 */
export const DASHBOARD_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

interface Asset {
  body: Buffer;
  type: string;
  etag: string;
}

/** What `web/build.mjs` writes: `index.html` and the files under `assets/`. */
async function loadAssets(dir: string): Promise<Map<string, Asset> | null> {
  let names: string[];
  try {
    names = ['index.html', ...(await readdir(join(dir, 'assets'))).map((name) => `assets/${name}`)];
  } catch {
    return null;
  }
  const assets = new Map<string, Asset>();
  for (const name of names) {
    const type = TYPES[extname(name)];
    if (!type) continue;
    let body: Buffer;
    try {
      body = await readFile(join(dir, name));
    } catch {
      continue;
    }
    assets.set(name, { body, type, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"` });
  }
  return assets.has('index.html') ? assets : null;
}

function send(request: FastifyRequest, reply: FastifyReply, asset: Asset, cache: string) {
  reply.header('content-type', asset.type).header('etag', asset.etag).header('cache-control', cache);
  if (request.headers['if-none-match'] === asset.etag) return reply.status(304).send();
  return reply.send(asset.body);
}

export async function registerDashboard(app: FastifyInstance, dir: string | undefined): Promise<void> {
  const assets = dir ? await loadAssets(dir) : null;
  const index = assets?.get('index.html');
  const page = async (request: FastifyRequest, reply: FastifyReply) => {
    if (!index) {
      return reply
        .status(404)
        .type('text/plain; charset=utf-8')
        .send('The dashboard is not built: run `npm run build`, then start the daemon again.\n');
    }
    reply.header('content-security-policy', DASHBOARD_CSP);
    // Always asked again (an ETag makes that cheap): a new build's index names new asset files.
    return send(request, reply, index, 'no-cache');
  };
  for (const url of DASHBOARD_PAGES) app.get(url, { schema: { hide: true } }, page);
  app.get('/assets/*', { schema: { hide: true } }, async (request, reply) => {
    const name = (request.params as { '*': string })['*'];
    const asset = assets?.get(`assets/${name}`);
    if (!asset) return reply.status(404).send({ detail: `No dashboard asset ${name}.`, code: 'NOT_FOUND' });
    reply.header('content-security-policy', DASHBOARD_CSP);
    // Asset names carry a hash of their content (the build names them so): cached for good.
    return send(request, reply, asset, 'public, max-age=31536000, immutable');
  });
}
