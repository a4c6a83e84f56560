/** Rule 12, tool_allowed (issue #50), and the tool patterns it and the tool prices read. */
import { describe, expect, it } from 'vitest';
import { explainDenial } from '../../../src/contract/denial-detail.js';
import { evaluate } from '../../../src/rules/engine.js';
import { mostSpecific, toolMatches, toolRefusal } from '../../../src/rules/tool-patterns.js';
import { OPEN_SNAPSHOT as open } from '../../support/guard-snapshot.js';

describe('tool patterns', () => {
  it.each([
    ['github.search', 'github.search', true],
    ['github.search', 'github.search_code', false],
    ['github.*', 'github.search_code', true],
    ['*.delete_*', 'fs.delete_file', true],
    ['*.delete_*', 'fs.undelete', false],
    ['*', 'anything.at_all', true],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'acb', false],
    ['fs.*_file', 'fs.file', false],
    ['fs_x.*', 'fsAx.read', false],
  ])('when %s is matched against %s, then it is %s', (pattern, tool, matches) => {
    expect(toolMatches(pattern, tool)).toBe(matches);
  });

  it('when several prices match, then the exact name wins, then the most literal characters, then fewer stars', () => {
    const patterns = ['*', 'github.*', 'github.search*', 'github.search_code', '*.search_*'];
    expect(mostSpecific(patterns, 'github.search_code')).toBe('github.search_code');
    expect(mostSpecific(patterns, 'github.search_issues')).toBe('github.search*');
    expect(mostSpecific(patterns, 'github.list')).toBe('github.*');
    expect(mostSpecific(patterns, 'fs.read')).toBe('*');
    expect(mostSpecific(['x.*'], 'fs.read')).toBeNull();
  });

  it('when a tool matches a deny pattern, then deny wins over allow; outside a non-null allow list it is refused', () => {
    expect(toolRefusal({ allow: ['fs.*'], deny: ['*.delete_*'] }, 'fs.delete_file')).toEqual({ pattern: '*.delete_*' });
    expect(toolRefusal({ allow: ['fs.*'], deny: null }, 'github.search')).toEqual({ pattern: null });
    expect(toolRefusal({ allow: ['fs.*'], deny: null }, 'fs.read')).toBeUndefined();
    expect(toolRefusal({ allow: null, deny: [] }, 'fs.read')).toBeUndefined();
  });
});

describe('rule tool_allowed', () => {
  const policy = { allow: null, deny: ['*.delete_*'] };

  it('when a step is no tool call of a workspace with a policy, then the rule is not evaluated', () => {
    expect(evaluate('step', open).evaluated_rules).not.toHaveProperty('tool_allowed');
  });

  it('when the tool is allowed, then the rule passes, last of the step rules', () => {
    const decision = evaluate('step', {
      ...open,
      userRate: { stepsInWindow: 0, limit: 5, windowSeconds: 60, retryAt: 'x', retryAfterSeconds: 0 },
      toolPolicy: { tool: 'fs.read', policy },
    });
    expect(decision.outcome).toBe('ALLOW');
    expect(Object.keys(decision.evaluated_rules).slice(-2)).toEqual(['user_rate', 'tool_allowed']);
  });

  it('when the tool matches a deny pattern, then TOOL_NOT_ALLOWED with the tool and the pattern', () => {
    const decision = evaluate('step', { ...open, toolPolicy: { tool: 'fs.delete_file', policy } });
    expect(decision).toMatchObject({
      outcome: 'DENY',
      reason: 'TOOL_NOT_ALLOWED',
      detail: { tool: 'fs.delete_file', pattern: '*.delete_*' },
    });
    expect(explainDenial('TOOL_NOT_ALLOWED', decision.detail)).toBe(
      `tool not allowed by the workspace's tool policy: "fs.delete_file" matches the deny pattern "*.delete_*"`,
    );
  });

  it('when an earlier rule denies, then tool_allowed is not evaluated', () => {
    const decision = evaluate('step', {
      ...open,
      killSwitchActive: true,
      toolPolicy: { tool: 'fs.delete_file', policy },
    });
    expect(decision.reason).toBe('KILL_SWITCH_ACTIVE');
    expect(decision.evaluated_rules).not.toHaveProperty('tool_allowed');
  });

  it('when the tool is outside the allow list, then the detail names no pattern', () => {
    const decision = evaluate('step', {
      ...open,
      toolPolicy: { tool: 'github.search', policy: { allow: ['fs.*'], deny: null } },
    });
    expect(decision.detail).toEqual({ tool: 'github.search', pattern: null });
    expect(explainDenial('TOOL_NOT_ALLOWED', decision.detail)).toContain('"github.search" is not in the allow list');
  });
});
