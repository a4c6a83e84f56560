/** A bounded map that forgets its oldest entries first. */
export class RecentMap<V> {
  private readonly map = new Map<string, V>();
  constructor(private readonly capacity: number) {}
  get(key: string): V | undefined {
    return this.map.get(key);
  }
  remember(key: string, value: V): void {
    if (this.map.has(key)) return;
    if (this.map.size >= this.capacity) this.map.delete(this.map.keys().next().value!);
    this.map.set(key, value);
  }
  forget(key: string): void {
    this.map.delete(key);
  }
}
