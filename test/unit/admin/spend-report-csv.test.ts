import { describe, expect, it } from 'vitest';
import { csvField } from '../../../src/admin/spend-report.js';

describe('a spend report CSV field', () => {
  it('when a key would run as a spreadsheet formula, then it is made inert with an apostrophe', () => {
    expect(csvField('=HYPERLINK("http://evil.example","x")')).toBe('"\'=HYPERLINK(""http://evil.example"",""x"")"');
    expect(csvField('+1')).toBe("'+1");
    expect(csvField('-2+3')).toBe("'-2+3");
    expect(csvField('@SUM(A1)')).toBe("'@SUM(A1)");
    expect(csvField('\tcmd')).toBe("'\tcmd");
  });

  it('when a key is plain, then it is written as it is, quoted only for commas, quotes and breaks', () => {
    expect(csvField('alice')).toBe('alice');
    expect(csvField('gpt-4o-mini')).toBe('gpt-4o-mini');
    expect(csvField('a,b')).toBe('"a,b"');
    expect(csvField(null)).toBe('');
  });
});
