/** Reserve mode's per-workspace queue in one daemon: one task at a time per key, in order. */
import { describe, expect, it } from 'vitest';
import { WorkspaceQueue } from '../../../src/guard/workspace-queue.js';

const tick = () => new Promise((resolve) => setTimeout(resolve, 5));

describe('WorkspaceQueue', () => {
  it('when tasks of one key overlap, then they run one at a time in arrival order', async () => {
    const queue = new WorkspaceQueue();
    const log: string[] = [];
    let running = 0;
    let most = 0;
    const task = (name: string) => async () => {
      running++;
      most = Math.max(most, running);
      log.push(`start ${name}`);
      await tick();
      log.push(`end ${name}`);
      running--;
      return name;
    };
    expect(await Promise.all(['a', 'b', 'c'].map((name) => queue.run('ws', task(name))))).toEqual(['a', 'b', 'c']);
    expect(most).toBe(1);
    expect(log).toEqual(['start a', 'end a', 'start b', 'end b', 'start c', 'end c']);
  });

  it('when a task fails, then the next still runs, and other keys never wait', async () => {
    const queue = new WorkspaceQueue();
    let releaseSlow!: () => void;
    const slow = queue.run('one', () => new Promise<void>((resolve) => (releaseSlow = resolve)));
    const failed = queue.run('one', async () => {
      throw new Error('refused');
    });
    const next = queue.run('one', async () => 'next');
    expect(await queue.run('two', async () => 'other')).toBe('other');
    releaseSlow();
    await slow;
    await expect(failed).rejects.toThrow('refused');
    expect(await next).toBe('next');
  });
});
