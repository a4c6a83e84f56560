/** Hop-by-hop headers (RFC 9110 7.6.1) and the ones recomputed on each side: what the floors drop. */
export const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'proxy-connection',
  'host',
  'content-length',
]);
