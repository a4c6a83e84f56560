/**
 * Sampled allocations of another Node process, over the inspector protocol: every allocation
 * site's bytes, garbage included (a heap snapshot or `--heap-prof` sees only what survives, and
 * what a hot path costs the GC is what does not).
 */
import { WebSocket } from 'undici';

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SamplingNode[];
}

export interface AllocationSite {
  site: string;
  bytes: number;
}

export async function startAllocationSampling(inspectPort: number, intervalBytes = 4096) {
  const targets = (await (await fetch(`http://127.0.0.1:${inspectPort}/json/list`)).json()) as {
    webSocketDebuggerUrl: string;
  }[];
  const socket = new WebSocket(targets[0]!.webSocketDebuggerUrl);
  await new Promise((resolve, reject) => {
    socket.onopen = resolve;
    socket.onerror = reject;
  });
  let nextId = 1;
  const pending = new Map<number, (result: unknown) => void>();
  socket.onmessage = (event) => {
    const message = JSON.parse(String(event.data)) as { id?: number; result?: unknown };
    if (message.id !== undefined) pending.get(message.id)?.(message.result);
  };
  const send = (method: string, params: object = {}) =>
    new Promise<unknown>((resolve) => {
      const id = nextId++;
      pending.set(id, resolve);
      socket.send(JSON.stringify({ id, method, params }));
    });
  await send('HeapProfiler.enable');
  await send('HeapProfiler.startSampling', {
    samplingInterval: intervalBytes,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  return {
    /** Stops sampling; allocation sites (function, file, line), largest first. */
    async stop(): Promise<AllocationSite[]> {
      const { profile } = (await send('HeapProfiler.stopSampling')) as { profile: { head: SamplingNode } };
      socket.close();
      const bySite = new Map<string, number>();
      const name = ({ functionName, url, lineNumber }: SamplingNode['callFrame']) =>
        `${functionName || '(anonymous)'} ${url.replace(/^.*node_modules\//, '').replace(/^.*\/dist\//, 'runguard:')}:${lineNumber + 1}`;
      // A builtin (`replace`, `Map`) says little alone: its caller is named with it.
      const walk = (node: SamplingNode, parent: string) => {
        const own = name(node.callFrame);
        if (node.selfSize > 0) {
          const site = node.callFrame.url === '' ? `${own} < ${parent}` : own;
          bySite.set(site, (bySite.get(site) ?? 0) + node.selfSize);
        }
        for (const child of node.children) walk(child, own);
      };
      walk(profile.head, '(root)');
      return [...bySite].map(([site, bytes]) => ({ site, bytes })).sort((a, b) => b.bytes - a.bytes);
    },
  };
}
